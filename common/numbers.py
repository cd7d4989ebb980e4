"""The one number formatter of everything a person reads: the CLI's tables and messages, the
simulator's HTML report and (mirrored line for line in ``kale/dashboard/static/app.js``) the
dashboard. It lives in the common leaf because both the shell (``kale``) and the simulator's
report (``autoscaler.sim``) use it, and the autoscaler may not import the shell.

The rule:

* three significant digits, an SI suffix (``k``, ``M``, ``G``, ``T``, ``P``) from a thousand
  up, never an exponent: ``8.03k``, ``14.9k``, ``1.23M``, ``612``, ``12.3``, ``2.50``,
  ``0.0123``, ``0.000000123`` (up to 10³⁶, far past anything Kale measures);
* whole numbers below a thousand are written whole (``25``, ``60``): counts of workers,
  rescales and folds are exact;
* rounding is half away from zero on the number's exact binary value (what JavaScript's
  ``toFixed`` does, so the page and the terminal never differ by a last digit), and a carry
  moves on to the next power of ten or suffix (``9.996`` → ``10.0``, ``999.7`` → ``1.00k``);
* a magnitude below 10⁻¹² is float noise and reads ``0``;
* missing values (``None``, NaN) are ``–``; infinities are ``∞`` and ``-∞``;
* fractions that are shares of something (SLO violations, coverage) are percentages with the
  same rule (``1.23%``, ``25%``).

JSON never goes through here: scripts get the exact values.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from numbers import Real

SIGNIFICANT = 3
SUFFIXES = ("", "k", "M", "G", "T", "P")
MISSING = "–"
TINY = 1e-12
"""Magnitudes below this read ``0``: no quantity Kale shows is that small, and printing float
noise in full would take twenty digits."""
HUGE = Decimal("1e21")
"""From here on (10²¹ P, 10³⁶) JavaScript's ``toFixed`` writes an exponent, and so does this
formatter, the same way (``1.23e+21P``); nothing Kale measures comes near."""


def format_number(value: object, *, digits: int = SIGNIFICANT) -> str:
    """``value`` for a person: ``digits`` significant digits, ``k``/``M``/… from 1000 up.

    Whole numbers below 1000 are exact; ``None`` and NaN are ``–``; anything that is not a
    number (a string, a bool) is returned as ``str(value)``.
    """
    if value is None:
        return MISSING
    value = _as_scalar(value)
    if isinstance(value, bool) or not isinstance(value, Real):
        return str(value)
    number = float(value)
    if math.isnan(number):
        return MISSING
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    if abs(number) < 1000 and number.is_integer():
        return str(int(number))
    return _significant(number, digits)


def format_percent(fraction: object, *, digits: int = SIGNIFICANT) -> str:
    """A fraction (0.0123) as a percentage with the same rule (``1.23%``)."""
    if fraction is None:
        return MISSING
    fraction = _as_scalar(fraction)
    if isinstance(fraction, bool) or not isinstance(fraction, Real):
        return str(fraction)
    text = format_number(100.0 * float(fraction), digits=digits)
    return text if text == MISSING else text + "%"


def format_rate(value: object, unit: str = "samples/s") -> str:
    """A rate with its unit: ``61.4k samples/s``."""
    return f"{format_number(value)} {unit}"


def _significant(number: float, digits: int) -> str:
    magnitude, tier = abs(number), 0
    if magnitude < TINY:
        return "0"
    sign = "-" if number < 0 else ""
    while magnitude >= 1000 and tier < len(SUFFIXES) - 1:
        magnitude, tier = magnitude / 1000.0, tier + 1
    while True:
        rounded = _to_significant(magnitude, digits)  # 9.996 → 10.0, 999.7 → 1.00E+3
        decimals = max(0, digits - 1 - rounded.adjusted())
        if rounded < 1000 or tier == len(SUFFIXES) - 1:
            break
        magnitude, tier = float(rounded) / 1000.0, tier + 1
    if rounded >= HUGE:  # the page's toFixed writes these as the shortest round trip
        return f"{sign}{float(rounded)!r}{SUFFIXES[tier]}"
    shown = rounded.quantize(Decimal(1).scaleb(-decimals))
    return f"{sign}{shown:f}{SUFFIXES[tier]}"


def _to_significant(magnitude: float, digits: int) -> Decimal:
    """``magnitude`` (> 0) to ``digits`` significant digits, ties away from zero, decided on
    its exact binary value: what the page's ``toPrecision`` does.

    Python's ``round`` and ``format`` break exact ties to even (``1.125`` → ``1.12``), the
    page's ``toPrecision`` upwards (``1.13``); deciding on the exact value with ties up is
    what both can do identically. A carry shows in the result's exponent (``9.996`` →
    ``10.0``).
    """
    exact = Decimal(magnitude)
    step = Decimal(1).scaleb(exact.adjusted() - digits + 1)
    return exact.quantize(step, rounding=ROUND_HALF_UP)


def _as_scalar(value: object) -> object:
    """numpy scalars (``np.float64``, ``np.int64``) become Python numbers."""
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, str | bytes):
        try:
            return item()
        except (TypeError, ValueError):
            return value
    return value
