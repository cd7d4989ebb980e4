"""The one number formatter of every table and message a person reads.

Three significant digits everywhere, an SI suffix from a thousand up and never an exponent:
``8.03k``, ``10.4k``, ``61.4k``, ``1.23M``, ``612``, ``12.3``, ``2.50``, ``0.0123``; whole
numbers below a thousand are written whole (``25``, ``60``). Fractions that are rates of
something (SLO violations, coverage) are shown as percentages with the same rule
(``1.23%``, ``25%``). JSON never goes through here: scripts get the exact values.

The dashboard's ``fmt`` (``kale/dashboard/static/app.js``) follows the same rule, so a
number reads the same in the terminal and in the browser.
"""

from __future__ import annotations

import math
from numbers import Real

SIGNIFICANT = 3
_SUFFIXES = ("", "k", "M", "G", "T", "P")
MISSING = "–"


def format_number(value: object, *, digits: int = SIGNIFICANT) -> str:
    """``value`` for a person: ``digits`` significant digits, ``k``/``M``/… from 1000 up.

    Whole numbers below 1000 are exact (counts of workers, rescales, folds); ``None`` and
    NaN are ``–``; anything that is not a number is returned as ``str(value)``.
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


def format_percent(fraction: float | None, *, digits: int = SIGNIFICANT) -> str:
    """A fraction (0.0123) as a percentage with the same rule (``1.23%``)."""
    if fraction is None:
        return MISSING
    text = format_number(100.0 * float(fraction), digits=digits)
    return text if text == MISSING else text + "%"


def format_rate(value: object, unit: str = "samples/s") -> str:
    """A rate with its unit: ``61.4k samples/s``."""
    return f"{format_number(value)} {unit}"


def _significant(number: float, digits: int) -> str:
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    magnitude, tier = abs(number), 0
    while magnitude >= 1000 and tier < len(_SUFFIXES) - 1:
        magnitude, tier = magnitude / 1000.0, tier + 1
    while True:
        # Rounding can carry into the next power of ten (9.996 → 10.0, 999.7 → 1.00k).
        exponent = math.floor(math.log10(magnitude))
        decimals = max(0, digits - 1 - exponent)
        rounded = round(magnitude, decimals)
        if rounded >= 10 ** (exponent + 1):
            exponent += 1
            decimals = max(0, digits - 1 - exponent)
            rounded = round(magnitude, decimals)
        if rounded < 1000 or tier == len(_SUFFIXES) - 1:
            break
        magnitude, tier = rounded / 1000.0, tier + 1
    return f"{sign}{rounded:.{decimals}f}{_SUFFIXES[tier]}"


def _as_scalar(value: object) -> object:
    """numpy scalars (``np.float64``, ``np.int64``) become Python numbers."""
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, str | bytes):
        try:
            return item()
        except (TypeError, ValueError):
            return value
    return value
