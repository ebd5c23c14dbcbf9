"""A range's source transactions read on the driver before the range is staged (``spec.changes.transactions``).

To align a trigger with the source's transactions (:mod:`spark_app.sources.transactions`) the driver must know, per
partition, which transaction each event of the range belongs to. :class:`TransactionScan` reads the range's records
from Kafka (the reader the tasks use, so the same records) and takes only the ``transaction`` block's id of each
change event, without decoding rows or writing files; the job then stages a range that is already aligned, once.

A change event is not parsed whole (its Connect schema and rows are most of it, and would cost the driver about as
much as decoding costs the tasks): :func:`event_transaction` reads the JSON value after the event's last
``"transaction":`` key. Debezium writes the envelope's ``transaction`` after ``before`` and ``after`` (whose columns
may have any name) and the Connect schema names fields as values (``"field": "transaction"``), never as keys, so
that is the envelope's block. The staged trigger is checked again with what its tasks noted while decoding, which
decides: a record the two read differently (not JSON, or JSON only the tasks' strict decoding refuses) costs a
staging discarded, never a transaction split.

What a partition's scan found is kept, from the range's start up to the furthest offset read: the range re-planned
(narrowed or grown) and the next trigger, which starts where this one ends, read only offsets not read yet. Nothing
is kept across restarts.
"""

from __future__ import annotations

import json
import sys
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from spark_app.decoding.changes import transaction_key
from spark_app.sources.kafka_client import ClientSettings, read_range

TopicPartition = tuple[str, int]
# Per partition, per transaction id: [offset of its first event, offset of its last event, events] in a range.
Seen = dict[TopicPartition, dict[str, list[int]]]
RangeReader = Callable[[ClientSettings, str, int, int, int], Iterator[pa.RecordBatch]]
TRANSACTION_KEY = b'"transaction":'
_JSON = json.JSONDecoder()


def event_transaction(value: bytes | None) -> str | None:
    """The source transaction a raw Debezium change event names (None: a tombstone, no ``transaction`` block, or
    one that is not JSON), keyed as the tasks key it (:func:`spark_app.decoding.changes.transaction_key`)."""
    if value is None or (at := value.rfind(TRANSACTION_KEY)) < 0:
        return None
    try:
        block, _ = _JSON.raw_decode(value[at + len(TRANSACTION_KEY):].decode("utf-8").lstrip())
    except ValueError:
        return None
    transaction = block.get("id") if isinstance(block, dict) else None
    return transaction_key(transaction) if isinstance(transaction, str) and transaction else None


@dataclass
class _Scanned:
    """One partition's offsets ``[start, end)`` read: the offset and transaction of each event that names one."""

    start: int
    end: int
    offsets: array[int] = field(default_factory=lambda: array("q"))
    transactions: list[str] = field(default_factory=list)

    def drop_below(self, start: int) -> None:
        cut = bisect_left(self.offsets, start)
        del self.offsets[:cut], self.transactions[:cut]
        self.start = start

    def between(self, start: int, end: int) -> dict[str, list[int]]:
        """Per transaction, ``[first, last, events]`` of its events in ``[start, end)``."""
        seen: dict[str, list[int]] = {}
        for index in range(bisect_left(self.offsets, start), bisect_left(self.offsets, end)):
            offset, transaction = self.offsets[index], self.transactions[index]
            known = seen.get(transaction)
            if known is None:
                seen[transaction] = [offset, offset, 1]
            else:
                known[1], known[2] = offset, known[2] + 1
        return seen


class TransactionScan:
    """The transactions of Kafka ranges, read on the driver and kept per partition (see the module doc)."""

    def __init__(self, client: ClientSettings, read: RangeReader = read_range) -> None:
        self.client = client
        self.read = read
        self.scanned: dict[TopicPartition, _Scanned] = {}

    def seen(self, starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]) -> Seen:
        """Per partition of the range ``[starts, ends)``, the transactions of its events (as the tasks note them:
        :attr:`spark_app.sources.units.UnitStats.transactions`)."""
        seen: Seen = {}
        for tp, start in starts.items():
            end = ends.get(tp, start)
            if end <= start:
                continue
            transactions = self._covering(tp, start, end).between(start, end)
            if transactions:
                seen[tp] = transactions
        return seen

    def _covering(self, tp: TopicPartition, start: int, end: int) -> _Scanned:
        """The partition's scan, moved to begin at ``start`` and read up to ``end`` at least."""
        scanned = self.scanned.get(tp)
        if scanned is None or not scanned.start <= start <= scanned.end:
            scanned = self.scanned[tp] = _Scanned(start, start)
        scanned.drop_below(start)
        if end > scanned.end:
            for batch in self.read(self.client, tp[0], tp[1], scanned.end, end):
                for offset, value in zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(),
                                         strict=True):
                    transaction = event_transaction(value)
                    if transaction is not None:
                        scanned.offsets.append(offset)
                        scanned.transactions.append(sys.intern(transaction))
            scanned.end = end
        return scanned
