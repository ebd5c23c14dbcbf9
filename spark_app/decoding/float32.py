"""Iceberg's ``float`` from an exact JSON number: the float32 it rounds to, as Java's ``Float.parseFloat`` reads it.

Debezium (Kafka's JsonConverter) prints a float32 with Java's ``Float.toString``: its largest value is
``3.4028235E38``, a little above float32's maximum as a double (3.4028234663852886e38) and rounding to it.
A number is a float when it rounds to a finite float32: below 2^128 - 2^103, the midpoint between the
maximum and 2^128 (a tie rounds to even: infinity).
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np

_ROUNDS_TO_INFINITY = Decimal(2**128 - 2**103)
_MAXIMUM = float(np.finfo(np.float32).max)


def float32_of(number: Decimal | int | str) -> float | None:
    """The float32 value (as a Python float) an exact number rounds to, or None when it rounds to infinity."""
    exact = Decimal(number)
    if not exact.is_finite() or exact.copy_abs() >= _ROUNDS_TO_INFINITY:  # copy_abs: exact, abs() rounds
        return None
    as_double = float(exact)
    if abs(as_double) >= _MAXIMUM:  # between the maximum and the midpoint: the maximum
        return _MAXIMUM if as_double > 0 else -_MAXIMUM
    return float(np.float32(as_double))


def float64_of(number: Decimal | int | str) -> float | None:
    """The double an exact number rounds to, or None when it rounds to infinity."""
    exact = Decimal(number)
    rounded = float(exact) if exact.is_finite() else float("inf")
    return rounded if abs(rounded) != float("inf") else None
