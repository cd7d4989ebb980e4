"""Kubernetes resource quantities (``"4"``, ``"200m"``, ``"24Gi"``, ``"1e9"``) as numbers.

The one place the scheduler reads quantities from: the ``kubernetes`` client's parser
(:func:`kubernetes.utils.parse_quantity`), with the scheduler's rules around it — a float is
read as written (``0.1`` is 0.1, not its binary approximation), a bool or an empty string is
not a quantity, and every failure is one :class:`QuantityError` naming the value.
"""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils import parse_quantity as _kubernetes_quantity


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """The quantity's value in base units (cores, bytes, devices)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Decimal(str(value))
    if not isinstance(value, str) or not value.strip():
        raise QuantityError(f"not a quantity: {value!r}")
    try:
        quantity: Decimal = _kubernetes_quantity(value.strip())
    except ValueError:
        raise QuantityError(f"not a quantity: {value!r}") from None
    return quantity


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
