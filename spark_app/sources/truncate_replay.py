"""Where each partition's events after a truncate start (driver side).

A truncate's commit empties the table and applies every event after it. Debezium gives no order between a
topic's partitions but the events' source positions, and a trigger may have read one partition past the
truncate before the truncate's own partition reached it (those changes are in the table and must survive)
or not yet up to it (those that precede it must not land). So for each partition the truncate's trigger reads
from the first event after the truncate, below the committed frontier when the table went past it (they are
applied again on the empty table), and at least up to it (what precedes it is read and skipped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from spark_app.decoding.changes import payload_of
from spark_app.decoding.source_positions import Position, source_position

WINDOW = 64  # offsets read at once while looking for an event with a position (tombstones have none)

RangeReader = Callable[[int, int], Iterator[pa.RecordBatch]]  # (start, end) -> raw batches (offset, value)


def _first_positioned(read: RangeReader, offset: int, end: int) -> tuple[int, Position] | None:
    """The first record at or after ``offset`` (below ``end``) whose event has a source position."""
    while offset < end:
        stop = min(offset + WINDOW, end)
        for batch in read(offset, stop):
            for at, value in zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True):
                place = source_position(payload_of(value))
                if place is not None:
                    return at, place
        offset = stop
    return None


def first_after(read: RangeReader, begin: int, end: int, truncate: Position) -> int:
    """The offset of the first event of ``[begin, end)`` after the truncate at ``truncate`` (``end``: none).

    Events are in source order within a partition, so the first one after it is found by bisection; records
    without a position (tombstones, other records) are stepped over."""
    low, high = begin, end  # the answer's probe offset is in [low, high]
    found = end
    while low < high:
        middle = (low + high) // 2
        first = _first_positioned(read, middle, high)
        if first is None or first[1] > truncate:
            if first is not None:
                found = first[0]
            high = middle
        else:
            low = first[0] + 1
    return found
