"""The SQLite history: durable, atomic, and a regular arrival series from irregular rows."""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest

from autoscaler.kafka.history import SCHEMA_VERSION, HistoryError, HistoryStore, StoredSnapshot
from common.errors import KaleError

T0 = 1_800_000_000.0  # a multiple of 60 s


def snap(t: float, end_total: int, group: str = "g", **kw: object) -> StoredSnapshot:
    return StoredSnapshot(topic="t", group=group, time=t, end_total=end_total, **kw)  # type: ignore[arg-type]


def test_rows_survive_reopening_the_file(tmp_path):
    path = tmp_path / "h.sqlite"
    with HistoryStore(path) as store:
        store.append(snap(T0, 10, committed_total=3), snap(T0 + 10, 20, committed_total=5))
    with HistoryStore(path) as store:
        rows = store.rows("t", "g")
        assert [r.end_total for r in rows] == [10, 20]
        assert store.latest("t", "g") == rows[-1]
        assert store.latest("t", "g", at_or_before=T0 + 5) == rows[0]
        assert store.has_topic("t") and not store.has_topic("other")


def test_file_uses_wal_and_records_its_schema_version(tmp_path):
    path = tmp_path / "h.sqlite"
    HistoryStore(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_a_file_from_a_newer_version_is_refused(tmp_path):
    path = tmp_path / "h.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(HistoryError, match="newer") as info:
        HistoryStore(path)
    assert isinstance(info.value, KaleError)


def test_a_file_that_is_not_sqlite_is_refused(tmp_path):
    path = tmp_path / "h.sqlite"
    path.write_text("not a database, just text " * 100)
    with pytest.raises(HistoryError):
        HistoryStore(path)


def test_arrival_series_from_irregular_samples_is_regular_and_exact(tmp_path):
    # 12 records/s, sampled every 7 s for 10 minutes: per-minute rates are exactly 12.
    with HistoryStore(tmp_path / "h.sqlite") as store:
        store.append(*(snap(T0 + 3 + i, 1000 + 12 * (3 + i)) for i in range(0, 600, 7)))
        series = store.arrival_series("t", T0, 60)
    assert series.index.tz is not None and str(series.index.tz) == "UTC"
    assert series.index.freq == pd.Timedelta(seconds=60)
    assert series.index[0] == pd.Timestamp(T0 + 60, unit="s", tz="UTC")  # first covered bin
    assert len(series) == 8
    np.testing.assert_allclose(series.to_numpy(), 12.0)


def test_arrival_series_combines_groups_and_backfill_rows(tmp_path):
    with HistoryStore(tmp_path / "h.sqlite") as store:
        store.append(*(snap(T0 + 60 * i, 600 * i, group="", source="backfill") for i in range(5)))
        store.append(snap(T0 + 330, 600 * 5 + 300, group="a"), snap(T0 + 360, 600 * 6, group="b"))
        series = store.arrival_series("t", T0, 60)
    np.testing.assert_allclose(series.to_numpy(), 10.0)
    assert len(series) == 6


def test_a_counter_reset_adds_no_arrivals(tmp_path):
    with HistoryStore(tmp_path / "h.sqlite") as store:
        store.append(snap(T0, 0), snap(T0 + 60, 600), snap(T0 + 61, 0), snap(T0 + 120, 590))
        series = store.arrival_series("t", T0, 60)
    assert series.iloc[0] == pytest.approx(10.0)
    assert series.iloc[1] == pytest.approx(590 / 60)


def test_long_gaps_can_be_reported_as_missing(tmp_path):
    with HistoryStore(tmp_path / "h.sqlite") as store:
        store.append(snap(T0, 0), snap(T0 + 60, 60), snap(T0 + 600, 600), snap(T0 + 660, 660))
        filled = store.arrival_series("t", T0, 60)
        gapped = store.arrival_series("t", T0, 60, max_gap_s=120)
    assert filled.notna().all()
    assert gapped.iloc[0] == pytest.approx(1.0) and gapped.iloc[-1] == pytest.approx(1.0)
    assert gapped.iloc[1:-1].isna().all()


def test_too_little_history_gives_an_empty_series(tmp_path):
    with HistoryStore(tmp_path / "h.sqlite") as store:
        assert store.arrival_series("t", T0, 60).empty
        store.append(snap(T0 + 1, 5))
        assert store.arrival_series("t", T0, 60).empty
