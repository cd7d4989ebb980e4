"""The dashboard's number formatter and "best" highlight, run in node on app.js itself.

The page, the terminal and the simulator's report must write a number the same way (``8.03k``,
never ``8.03e+3``; ``common/numbers.py`` is the rule, ``fmt`` in app.js its mirror), and the
comparison table must never highlight a run that broke the SLO as the best. The helpers
section of ``app.js`` is plain functions, so node evaluates it without a browser; the test
skips, saying why, only where no ``node`` binary exists.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from common.numbers import format_number, format_percent

APP_JS = Path(__file__).resolve().parents[2] / "kale" / "dashboard" / "static" / "app.js"
NODE = shutil.which("node") or shutil.which("nodejs")
VALUES = [8030.0, 10400.0, 61390.0, 999.7, 999999.0, 1234567.0, 612.4, 12.345, 9.996, 2.5]
VALUES += [0.5, 0.0123, 1.23e-7, 0.0, -61390.0, 25.0, 46.0, 3.0, 1e13]


def _helpers() -> str:
    text = APP_JS.read_text(encoding="utf-8")
    return text[text.index("// -- helpers") : text.index("// -- cluster")]


def _node(script: str, stdin: str = "") -> object:
    if NODE is None:
        pytest.skip(
            "node is not installed: the dashboard's helpers cannot be run outside a browser"
        )
    done = subprocess.run(
        [NODE, "-e", _helpers() + "\n" + script],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_page_formats_numbers_exactly_as_the_terminal():
    shown = _node(f"console.log(JSON.stringify({json.dumps(VALUES)}.map((v) => fmt(v))))")
    assert shown == [format_number(v) for v in VALUES]
    assert "e" not in "".join(shown)  # never an exponent


# The corners of the rule: exact binary ties (1.125, 10.25: Python's round would go to even,
# the page's toPrecision up), carries into the next power of ten or suffix, the last suffix,
# float noise, and the exponent JavaScript falls back to past 10**36.
CORNERS = [1.125, 10.25, 0.125, 2.675, 0.0999996, 999.95, 999.5, 999.4999, 1000.0, 1500.0]
CORNERS += [9.995e5, 1e15, 999.5e15, 1e18, 1e21, 1e36, 1.234e40, -1.125, -999.95, 1e-12]
CORNERS += [9.99e-13, -1e-13, 5e-324, 1.7976931348623157e308, 14920.5, 1409.9, 0.1, 1 / 3]


def _table(n: int = 4000) -> list[float]:
    """A fixed table of values: the corners, a log-uniform spread of magnitudes from 1e-14 to
    1e22 of both signs, every three-digit mantissa with a trailing 5 at each scale, and raw
    bit patterns (any double at all)."""
    rng = random.Random(20)
    values = list(CORNERS)
    values += [rng.choice((1, -1)) * 10 ** rng.uniform(-14, 22) for _ in range(n)]
    values += [(m + 0.5) * 10.0**e for m in range(100, 1000, 7) for e in range(-9, 19, 3)]
    values += [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(63)))[0] for _ in range(n)]
    return [v for v in values if math.isfinite(v)]


def test_the_page_and_the_terminal_agree_on_every_value_of_a_table():
    values = _table()
    shown, percents = _node(
        "const v = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify([v.map((x) => fmt(x)), v.map(fmtPct)]))",
        stdin=json.dumps(values),
    )
    assert len(shown) == len(values)
    assert [(v, t) for v, t in zip(values, shown, strict=True) if t != format_number(v)] == []
    assert [(v, t) for v, t in zip(values, percents, strict=True) if t != format_percent(v)] == []
    assert [format_number(v) for v in (1.125, 10.25, 999.95, 1e-13)] == [
        "1.13",
        "10.3",
        "1.00k",
        "0",
    ]


def test_missing_values_read_the_same_on_the_page():
    shown = _node(
        "console.log(JSON.stringify([fmt(null), fmt(NaN), fmt(Infinity), "
        "fmt(-Infinity), fmtPct(null), fmtPct(NaN)]))"
    )
    expected = [format_number(None), format_number(math.nan), format_number(math.inf)]
    expected += [format_number(-math.inf), format_percent(None), format_percent(math.nan)]
    assert shown == expected == ["–", "–", "∞", "-∞", "–", "–"]


def test_percentages_read_the_same_on_the_page():
    fractions = [0.0123, 0.25, 0.0, 0.19567]
    shown = _node(f"console.log(JSON.stringify({json.dumps(fractions)}.map(fmtPct)))")
    assert shown == [format_percent(f) for f in fractions] == ["1.23%", "25%", "0%", "19.6%"]


def test_the_best_highlight_never_goes_to_a_run_that_broke_the_slo():
    policies = {
        # cheapest of all, but 20 % of its steps were late: not a win
        "static-min": {"slo_violation_rate": 0.20, "gpu_hours": 10.0, "rescale_count": 0},
        "kale": {"slo_violation_rate": 0.004, "gpu_hours": 40.0, "rescale_count": 12},
        "hpa": {"slo_violation_rate": 0.0, "gpu_hours": 55.0, "rescale_count": 30},
    }
    keys = ["slo_violation_rate", "gpu_hours", "rescale_count"]
    best = _node(
        f"console.log(JSON.stringify(simBest({json.dumps(policies)}, "
        f"{json.dumps(list(policies))}, {json.dumps(keys)})))"
    )
    assert best == {"slo_violation_rate": ["hpa"], "gpu_hours": ["kale"], "rescale_count": ["kale"]}


def test_nothing_is_highlighted_when_every_run_broke_the_slo():
    policies = {"a": {"slo_violation_rate": 0.5, "gpu_hours": 1.0}}
    best = _node(
        f"console.log(JSON.stringify(simBest({json.dumps(policies)}, ['a'], ['gpu_hours'])))"
    )
    assert best == {"gpu_hours": []}
