"""Cron expressions, parsed and searched backwards: when did a schedule's window last open?

Why written here rather than taken from a library: a job's ``spec.schedules`` needs only
two things — a clear error naming what is wrong with an expression (``kale validate``), and
"the latest firing at or before t" in a time zone (is the window open now?) — and none of
the small cron libraries is a dependency of Kale. The grammar is the standard five fields
(minute, hour, day of month, month, day of week) as KEDA's cron scaler and Kubernetes
CronJobs read them: ``*``, lists ``a,b``, ranges ``a-b``, steps ``*/n`` and ``a-b/n``,
month and weekday names (``JAN``, ``MON``), ``7`` for Sunday, and the macros ``@yearly``,
``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@midnight`` and ``@hourly``. As in
Vixie cron, when both day fields are restricted a day matches if either does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# (name, low, high, names mapped to numbers)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {m: i + 1 for i, m in enumerate(_MONTHS)}),
    ("day of week", 0, 7, {d: i for i, d in enumerate(_DAYS)}),
)


class CronError(ValueError):
    """An expression that is not a five-field cron schedule; the message says which part."""


def _number(text: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    value = names.get(text.upper())
    if value is None:
        if not text.isdigit():
            raise CronError(f"{name} field: {text!r} is not a number from {low} to {high}")
        value = int(text)
    if not low <= value <= high:
        raise CronError(f"{name} field: {value} is outside {low}-{high}")
    return value


def _field(text: str, name: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronError(f"{name} field: empty item in {text!r}")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"{name} field: step {step_text!r} is not a positive number")
            step = int(step_text)
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            first = _number(a, name, low, high, names)
            last = _number(b, name, low, high, names)
            if first > last:
                raise CronError(f"{name} field: range {base!r} runs backwards")
        else:
            first = _number(base, name, low, high, names)
            last = high if slash else first
        out.update(range(first, last + 1, step))
    return frozenset(out)


@dataclass(frozen=True)
class Cron:
    """A parsed expression: the set of values each field matches."""

    text: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0 = Sunday … 6 = Saturday (7 is folded into 0)."""
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, text: str) -> Cron:
        expr = MACROS.get(text.strip().lower(), text)
        parts = expr.split()
        if len(parts) != 5:
            raise CronError(
                f"{text!r} has {len(parts)} fields; a cron schedule has 5 (minute hour "
                "day-of-month month day-of-week) or is one of " + ", ".join(MACROS)
            )
        sets = [_field(p, *spec) for p, spec in zip(parts, _FIELDS, strict=True)]
        weekdays = frozenset(d % 7 for d in sets[4])
        return cls(
            text=text,
            minutes=tuple(sorted(sets[0], reverse=True)),
            hours=tuple(sorted(sets[1], reverse=True)),
            days=sets[2],
            months=sets[3],
            weekdays=weekdays,
            any_day=parts[2].startswith("*"),
            any_weekday=parts[4].startswith("*"),
        )

    def matches_day(self, d: date) -> bool:
        if d.month not in self.months:
            return False
        in_month = d.day in self.days
        in_week = (d.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:  # one is "*": both must match (one trivially)
            return in_month and in_week
        return in_month or in_week

    def last_at_or_before(self, t: float, tz: ZoneInfo, lookback_s: float) -> float | None:
        """Epoch seconds of the latest firing ≤ ``t`` not older than ``lookback_s``, or None.

        Walks back day by day (local calendar of ``tz``), then hours and minutes in
        descending order: a handful of steps for any window up to a week.
        """
        local = datetime.fromtimestamp(t, tz)
        oldest = t - lookback_s
        day = local.date()
        today = (local.hour, local.minute)
        for _ in range(math.ceil(lookback_s / 86400.0) + 2):
            if self.matches_day(day):
                for h in self.hours:
                    if day == local.date() and h > today[0] + 1:
                        continue  # later today (one hour of slack for a DST fold)
                    for m in self.minutes:
                        fire = datetime(day.year, day.month, day.day, h, m, tzinfo=tz).timestamp()
                        if fire <= t:
                            return fire if fire >= oldest else None
            day -= timedelta(days=1)
            end_of_day = datetime(day.year, day.month, day.day, 23, 59, tzinfo=tz).timestamp()
            if end_of_day < oldest:
                return None
        return None


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; a ValueError naming it when the zone database lacks it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(
            f"{name!r} is not a time zone of the IANA database (e.g. UTC, Europe/Paris)"
        ) from exc
