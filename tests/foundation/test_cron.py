"""Cron expressions (``spec.schedules[].cron``): the grammar, its errors, and the latest
firing at or before a time in a time zone (daylight saving included)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from common.cron import Cron, CronError, zone

UTC = ZoneInfo("UTC")
PARIS = ZoneInfo("Europe/Paris")


def ts(text: str, tz: ZoneInfo = UTC) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=tz).timestamp()


def last(expr: str, at: str, tz: ZoneInfo = UTC, lookback: float = 8 * 86400) -> str | None:
    fired = Cron.parse(expr).last_at_or_before(ts(at, tz), tz, lookback)
    return None if fired is None else datetime.fromtimestamp(fired, tz).isoformat()[:16]


def test_fields_lists_ranges_steps_and_names():
    c = Cron.parse("*/15 8-10,22 1,15 JAN-mar mon-FRI")
    assert sorted(c.minutes) == [0, 15, 30, 45]
    assert sorted(c.hours) == [8, 9, 10, 22]
    assert c.days == {1, 15} and c.months == {1, 2, 3}
    assert c.weekdays == {1, 2, 3, 4, 5}
    assert Cron.parse("0 0 * * 7").weekdays == {0}  # 7 is Sunday too
    assert Cron.parse("5-59/20 * * * *").minutes == (45, 25, 5)
    assert Cron.parse("@daily") == Cron.parse("@daily")
    assert Cron.parse("@hourly").minutes == (0,)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("0 9 * *", "has 4 fields"),
        ("60 * * * *", "minute field: 60 is outside 0-59"),
        ("0 24 * * *", "hour field: 24 is outside 0-23"),
        ("0 0 0 * *", "day of month field: 0 is outside 1-31"),
        ("0 0 * 13 *", "month field: 13 is outside 1-12"),
        ("0 0 * * 8", "day of week field: 8 is outside 0-7"),
        ("0 0 * * FUNDAY", "day of week field: 'FUNDAY' is not a number"),
        ("*/0 * * * *", "minute field: step '0' is not a positive number"),
        ("5-1 * * * *", "range '5-1' runs backwards"),
        ("1,,2 * * * *", "empty item"),
        ("@fortnightly", "has 1 fields"),
    ],
)
def test_bad_expressions_say_which_field(expr, message):
    with pytest.raises(CronError, match=message):
        Cron.parse(expr)


def test_the_latest_firing_at_or_before_a_time():
    assert last("0 9 * * MON-FRI", "2026-01-07T12:00") == "2026-01-07T09:00"  # a Wednesday
    assert last("0 9 * * MON-FRI", "2026-01-07T09:00") == "2026-01-07T09:00"  # inclusive
    assert last("0 9 * * MON-FRI", "2026-01-07T08:59") == "2026-01-06T09:00"
    assert last("0 9 * * MON-FRI", "2026-01-11T23:00") == "2026-01-09T09:00"  # the weekend
    assert last("*/20 * * * *", "2026-01-07T12:59") == "2026-01-07T12:40"
    assert last("0 0 1 * *", "2026-03-15T00:00", lookback=15 * 86400) == "2026-03-01T00:00"
    assert last("0 9 * * MON", "2026-01-07T12:00", lookback=3600) is None  # too long ago


def test_day_of_month_or_day_of_week_when_both_are_restricted():
    # Vixie cron: the 13th, or any Friday.
    assert last("0 0 13 * FRI", "2026-01-10T00:00") == "2026-01-09T00:00"  # a Friday
    assert last("0 0 13 * FRI", "2026-01-14T00:00") == "2026-01-13T00:00"  # a Tuesday the 13th


def test_firings_are_read_in_the_time_zone_across_daylight_saving():
    # Paris moves to summer time on 2026-03-29: 09:00 local is 08:00 UTC before, 07:00 after.
    assert last("0 9 * * *", "2026-03-28T12:00", PARIS) == "2026-03-28T09:00"
    before = Cron.parse("0 9 * * *").last_at_or_before(ts("2026-03-28T12:00"), PARIS, 86400)
    after = Cron.parse("0 9 * * *").last_at_or_before(ts("2026-03-30T12:00"), PARIS, 86400)
    assert before == ts("2026-03-28T08:00") and after == ts("2026-03-30T07:00")


def test_time_zones_come_from_the_iana_database():
    assert zone("Europe/Paris").key == "Europe/Paris"
    for bad in ("Mars/Olympus", "../etc/passwd", ""):
        with pytest.raises(ValueError, match="is not a time zone"):
            zone(bad)
