"""Work units: exact, replayable parts of a trigger's range that Spark schedules (docs/dataplane.md).

The driver plans a trigger's units from the frontier; each task reads its units straight into Arrow
with the source's :class:`UnitReader` and decodes them into *decoded batches*: the declared columns
in the table's Arrow types plus the control columns of :mod:`spark_app.decoding.deadletter` (and, for keyed
syncs, ``_isync_op``/``_isync_order``). Reading a unit twice gives the same records.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from spark_app.decoding.schema_drift.drift import SchemaDrift
from spark_app.decoding.source_positions import Position

# Bits of ``_isync_order`` below the unit index: a unit holds fewer than 2**40 records.
ORDER_UNIT_SHIFT = 40


@dataclass(frozen=True)
class WorkUnit:
    """Base of every unit; ``index`` is the unit's place in the trigger's source order."""

    index: int


@dataclass(frozen=True)
class GeneratorUnit(WorkUnit):
    """Generator ids ``[start, end)``."""

    start: int
    end: int


@dataclass(frozen=True)
class FileUnit(WorkUnit):
    """A file, or the byte slice ``[start, end)`` of a text file (a slice starts after a line end and
    ends at one; ``first_line`` is the 1-based number of its first line, or None when not yet known)."""

    uri: str
    start: int = 0
    end: int | None = None
    first_line: int | None = 1


@dataclass(frozen=True)
class KafkaUnit(WorkUnit):
    """Offsets ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass
class UnitStats:
    """What reading units found besides records, summed over a trigger into the commit's source notes
    (for example offsets that hold no record: compacted away, transaction markers), and the schema drift
    of its change records (spark_app/decoding/schema_drift/)."""

    counters: dict[str, int] = field(default_factory=dict)
    drift: SchemaDrift = field(default_factory=SchemaDrift)  # what the records' Connect schemas ask of the table
    # Source transactions seen (spec.changes.transactions): per (topic, partition), per transaction id, the
    # offsets of its first and last event read and how many events were read: [first, last, count].
    transactions: dict[tuple[str, int], dict[str, list[int]]] = field(default_factory=dict)
    truncate: Position | None = None  # the source position of the newest truncate read (spark_app/decoding/source_positions.py)

    def add(self, name: str, count: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + count

    def saw_transaction(self, topic: str, partition: int, transaction: str, first: int, last: int,
                        count: int = 1) -> None:
        """Events of ``transaction`` at offsets ``first``..``last`` of a partition (``count`` of them)."""
        seen = self.transactions.setdefault((topic, partition), {})
        known = seen.get(transaction)
        if known is None:
            seen[transaction] = [first, last, count]
        else:
            known[0], known[1], known[2] = min(known[0], first), max(known[1], last), known[2] + count

    def saw_truncate(self, position: Position | None) -> None:
        """A truncate at ``position`` (None: none) was read."""
        if position is not None and (self.truncate is None or position > self.truncate):
            self.truncate = position

    def merge(self, other: UnitStats) -> None:
        self.saw_truncate(other.truncate)
        for name, count in other.counters.items():
            self.add(name, count)
        self.drift.merge(other.drift)
        for (topic, partition), seen in other.transactions.items():
            for transaction, (first, last, count) in seen.items():
                self.saw_transaction(topic, partition, transaction, first, last, count)


class UnitReader(Protocol):
    """Runs in the tasks (so it must pickle): a unit's records as decoded batches."""

    def __call__(self, unit: WorkUnit, stats: UnitStats) -> Iterator[pa.RecordBatch]: ...


def order_base(unit: WorkUnit) -> int:
    """The ``_isync_order`` of a unit's first record."""
    return unit.index << ORDER_UNIT_SHIFT
