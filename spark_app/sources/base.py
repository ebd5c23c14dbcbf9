"""The source interface: plan the next range from a frontier, then read exactly that range.

A source never keeps progress of its own. The job hands it the frontier the table holds, the
source says what is pending beyond it (cheaply), then plans ``[frontier, end)`` as work units that
the tasks read straight into Arrow (docs/dataplane.md). Reading the same range twice gives the same
records, which is what makes replays after a crash exact. Adding a source is a new module with a subclass and an entry in spark_app.sources.registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from icebergsync.protocol import Frontier, SourceIdentity
from icebergsync.spec import Column as SpecColumn
from icebergsync.spec import IcebergSyncSpec
from spark_app.decoding.source_positions import Position
from spark_app.sources.units import UnitReader, UnitStats, WorkUnit


@dataclass(frozen=True)
class Pending:
    """What a source has beyond a frontier: the range end, and a size estimate to decide when to commit."""

    end: Frontier
    estimated_bytes: int
    reaches_end: bool = False  # a bounded source has nothing after ``end``
    full: bool = False  # capped (per-trigger limit or size): waiting cannot grow it
    lag: dict[str, Any] | None = None
    notes: dict[str, Any] | None = None
    detail: Any = None  # what the source planned beyond the frontier's shape (e.g. the files of the range)
    truncating: dict[str, Position] | None = None  # tables whose commit of this range empties them first, and where


SessionProvider = Callable[[], SparkSession]


class Source(ABC):
    """A replayable source addressed by frontiers (JSON-compatible dicts).

    The Spark session may still be starting while the sink fences: ``spark`` waits for it on first use.
    """

    def __init__(self, spark: SparkSession | SessionProvider, spec: IcebergSyncSpec):
        self._session = spark
        self.spec = spec

    @property
    def spark(self) -> SparkSession:
        if not isinstance(self._session, SparkSession):
            self._session = self._session()
        return self._session

    @abstractmethod
    def initial_frontier(self) -> Frontier:
        """Where a sink with no progress in the table starts."""

    def identity(self) -> SourceIdentity:
        """What identifies this source's records, recorded with every frontier (a frontier recorded
        for another identity is refused). The kind, plus what addresses the records where a
        frontier of the same shape could point into another source's."""
        return {"kind": self.spec.source.kind}

    @staticmethod
    @abstractmethod
    def check_frontier(frontier: Frontier) -> None:
        """Raise ``ValueError`` when ``frontier`` is not of this source's shape."""

    @abstractmethod
    def pending(self, frontier: Frontier, max_bytes: int) -> Pending | None:
        """What is available beyond ``frontier`` now (at most about ``max_bytes``); None when nothing is."""

    @abstractmethod
    def plan_units(self, frontier: Frontier, pending: Pending) -> list[WorkUnit]:
        """Split ``[frontier, pending.end)`` into work units, in source order (``unit.index`` = place in the list).

        Units are small enough that every core has work (see :meth:`cores`), never so small that
        files come out far below the target size for that reason alone.
        """

    @abstractmethod
    def unit_reader(self, columns: list[SpecColumn], key: list[str] | None = None,
                    truncated_at: Position | None = None) -> UnitReader:
        """The picklable reader the tasks run: a unit's records decoded into ``columns``; change records by ``key``
        (a table's own key in a sync of many; None: ``spec.table.key``), those up to the source position of the
        truncate the table applied (``truncated_at``) skipped (spark_app/sources/truncate_replay.py)."""

    def after_truncate(self, pending: Pending, owns: Callable[[str], bool] | None, truncate: Position) -> Pending:
        """``pending`` read so that the table of the streams ``owns`` (None: every stream) can be emptied at the truncate
        at source position ``truncate`` and hold what follows it (spark_app/sources/truncate_replay.py): a source of one ordered
        stream (files) reads the same range, what precedes the truncate skipped while decoding."""
        return pending

    def record_columns(self) -> list[SpecColumn]:
        """The columns of the source's records: what ``spec.transform`` sees as the view ``source``."""
        return list(self.spec.schema_)

    def stream_of(self, unit: WorkUnit) -> str | None:
        """The stream ``unit`` reads (a Kafka topic), which names its table in a sync of many; None for a source
        that is one stream."""
        return None

    def streams(self) -> list[str] | None:
        """The streams the source has now (Kafka: its topics, those of ``topicPattern`` listed again); None when
        they cannot be listed now (ask again later)."""
        return []

    @abstractmethod
    def backlog(self, frontier: Frontier, pending: Pending | None,
                owns: Callable[[str], bool] | None = None) -> dict[str, Any]:
        """The source's lag beyond ``frontier`` now (icebergsync.metrics.lag), ``pending`` being what it has there
        (None: nothing, the lag is 0); of the streams ``owns`` only (None: all)."""

    def restricted(self, pending: Pending, owns: Callable[[str], bool]) -> Pending:
        """``pending`` as one table of a sync of many sees it: the lag and notes of the streams it ``owns``."""
        return pending

    def within(self, pending: Pending, end: dict[tuple[str, int], int]) -> Pending:
        """``pending`` ending at ``end`` instead (a source with partitioned streams: the Kafka source)."""
        raise NotImplementedError(f"the {self.spec.source.kind} source has no partitioned ranges")

    def trigger_notes(self, pending: Pending, stats: UnitStats) -> dict[str, Any] | None:
        """The commit's ``icebergsync.source-notes``: the planning notes and what reading the units counted."""
        notes = {**(pending.notes or {}), **stats.counters}
        return notes or None

    def cores(self) -> int:
        """Task slots Spark has for a trigger."""
        return int(self.spark.sparkContext.defaultParallelism)

    def exhausted(self, frontier: Frontier) -> bool:
        """True when a bounded source has nothing left after ``frontier``."""
        return False

    def parallelism(self, estimated_bytes: int) -> int:
        """Tasks for a range: enough for the cores, never so many that files come out small."""
        target = self.spec.commit.target_file_bytes
        cores = self.spark.sparkContext.defaultParallelism
        return max(1, min(cores, -(-estimated_bytes // target)))

