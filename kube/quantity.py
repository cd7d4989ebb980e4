"""Kubernetes resource quantities (``"4"``, ``"200m"``, ``"24Gi"``, ``"1e9"``) as numbers.

The ``kubernetes`` client has a parser, but only ``autoscaler/actuators/`` may import the
client; the scheduler's model of the cluster is plain Python, so it parses here.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """The quantity's value in base units (cores, bytes, devices)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Decimal(str(value))
    if not isinstance(value, str) or not value.strip():
        raise QuantityError(f"not a quantity: {value!r}")
    text = value.strip()
    try:
        if text[-2:] in _BINARY:
            return Decimal(text[:-2]) * _BINARY[text[-2:]]
        if text[-1:] in _DECIMAL and not text[-1:].isdigit():
            return Decimal(text[:-1]) * _DECIMAL[text[-1:]]
        return Decimal(text)  # plain number, or an exponent such as 1e9 / 1E3
    except InvalidOperation:
        raise QuantityError(f"not a quantity: {value!r}") from None


def cpu_milli(value: object) -> int:
    """CPU in millicores, rounded up (the API server's own rounding for requests)."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def memory_mib(value: object) -> int:
    """Memory in MiB, rounded up."""
    return int((parse_quantity(value) / 2**20).to_integral_value(rounding="ROUND_CEILING"))


def count(value: object) -> int:
    """A device count such as ``nvidia.com/gpu`` (must be a whole number)."""
    q = parse_quantity(value)
    if q != q.to_integral_value() or q < 0:
        raise QuantityError(f"not a whole number of devices: {value!r}")
    return int(q)
