"""What tests of cuts across tables check: orders and their lines, committed together or not at all."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pyarrow as pa


def broken_orders(orders: pa.Table, lines: pa.Table) -> list[int]:
    """Orders whose lines do not sum to their total, and lines without their order."""
    sums: dict[int, float] = {}
    for order_id, amount in zip(lines["order_id"].to_pylist(), lines["amount"].to_pylist(), strict=True):
        sums[order_id] = sums.get(order_id, 0.0) + amount
    totals = dict(zip(orders["order_id"].to_pylist(), orders["total"].to_pylist(), strict=True))
    return sorted({i for i, total in totals.items() if sums.get(i) != total} | (sums.keys() - totals.keys()))


def reads_during(read: Callable[[], tuple[pa.Table, pa.Table]], land: Callable[[], None]) -> list[tuple[int, list[int]]]:
    """Both tables read (``read``: orders, lines) again and again in a thread while ``land()`` commits cuts, each read
    as (its orders' row count, its :func:`broken_orders`); the last read starts after ``land`` returned."""
    done = threading.Event()
    reads: list[tuple[int, list[int]]] = []

    def read_until_done() -> None:
        while True:
            finished = done.is_set()
            orders, lines = read()
            reads.append((orders.num_rows, broken_orders(orders, lines)))
            if finished:
                return

    reader = threading.Thread(target=read_until_done)
    reader.start()
    try:
        land()
    finally:
        done.set()
        reader.join()
    return reads
