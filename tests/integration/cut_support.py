"""What tests of cuts across tables check: orders and their lines, committed together or not at all."""

from __future__ import annotations

import pyarrow as pa


def broken_orders(orders: pa.Table, lines: pa.Table) -> list[int]:
    """Orders whose lines do not sum to their total, and lines without their order."""
    sums: dict[int, float] = {}
    for order_id, amount in zip(lines["order_id"].to_pylist(), lines["amount"].to_pylist(), strict=True):
        sums[order_id] = sums.get(order_id, 0.0) + amount
    totals = dict(zip(orders["order_id"].to_pylist(), orders["total"].to_pylist(), strict=True))
    return sorted({i for i, total in totals.items() if sums.get(i) != total} | (sums.keys() - totals.keys()))
