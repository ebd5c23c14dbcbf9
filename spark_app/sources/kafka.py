"""Kafka topics read with confluent-kafka (librdkafka) in the tasks; progress lives only in the table.

Frontier: ``{"<topic>": {"<partition>": next_offset}}`` — every record of a listed partition below
its offset is in the table. Each trigger reads exactly ``[frontier, end)``: the driver plans it from
the partitions' offsets and splits it into :class:`~spark_app.sources.units.KafkaUnit` s (one per partition
range, a large range in several so that every core has work); each task reads its units with
:func:`spark_app.sources.kafka_client.read_range` (``assign`` + seek, a throwaway group id that is never
joined or committed, ``enable.auto.commit=false``). There is no Spark checkpoint, no Spark Kafka
connector, and nothing is committed to Kafka.

* A unit's reader stops exactly at its end, also when the last offsets of the range hold no record,
  never returns a record outside the range, and fails the trigger when a record outside the range
  appears, when the broker no longer has the start (deleted after planning) or when the partition
  ends below the range's end. Offsets inside a range that carry no record (compaction, transaction
  markers, aborted records) are counted in the commit's ``icebergsync.source-notes``
  (``offsets-without-records``).
* Transactions: both the offset lookup and the reader use ``isolation.level=read_committed``, so
  records of aborted transactions are never read, and the end offset of a partition is its last
  stable offset: an open transaction holds the frontier back until it commits or aborts. Aborted
  records and commit markers are offsets without records (gaps) inside a range, never data loss.
  ``options: {isolation.level: read_uncommitted}`` reads everything instead.
* A partition missing from the frontier (added to the topic later, or never seen) starts at its
  earliest offset.
* A frontier offset below the partition's earliest offset means the broker deleted records the
  table never got (retention): one WARNING line names topic, partition and the lost range, and the
  commit that moves past it records it under ``lost-offsets`` in its source notes.
* A frontier offset above the partition's end (topic recreated?): one WARNING line, noted as
  ``frontier-beyond-end``; the partition waits until its log passes the frontier.
* Lag: per-partition end offset minus the committed end, in ``icebergsync.source-lag``.
* ``options`` and the ``secretRef`` Secret configure the client (TLS, SASL PLAIN/SCRAM; see
  :func:`spark_app.sources.kafka_client.client_settings`); settings that decide the range are refused.

Offsets and partitions are looked up on the driver with the same client (an AdminClient,
:class:`spark_app.sources.kafka_client.OffsetLookup`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from icebergsync.catalog import read_secret, resolve_env
from icebergsync.errors import SpecError
from icebergsync.metrics.lag import kafka_lag, partitions_lag
from icebergsync.protocol import Frontier
from icebergsync.spec import Column as SpecColumn
from icebergsync.spec import IcebergSyncSpec
from spark_app.decoding.arrow_decode import decode_json_values, target_schema
from spark_app.decoding.registry.client import SECRET_PREFIX as REGISTRY_SECRET_PREFIX
from spark_app.decoding.registry.client import RegistrySettings
from spark_app.decoding.registry.records import TableColumns, decode_registry_values
from spark_app.decoding.source_positions import Position
from spark_app.sources.base import Pending, Source
from spark_app.sources.file_lines import ChangeReading
from spark_app.sources.kafka_client import (
    ClientSettings,
    KafkaAccessError,
    OffsetLookup,
    Offsets,
    RangeCounts,
    client_settings,
    read_range,
)
from spark_app.sources.truncate_replay import first_after
from spark_app.sources.units import KafkaUnit, UnitStats, WorkUnit, order_base

log = logging.getLogger("icebergsync.source.kafka")

ESTIMATED_BYTES_PER_RECORD = 64  # staged Parquet bytes per decoded record: only sizes triggers and tasks
# A partition's range is split for more cores only into units of at least this many offsets.
MIN_UNIT_OFFSETS = 4096
# Options of Spark's Kafka source that keep their meaning: at least this many units per trigger, at
# most this many offsets per unit.
PLANNING_OPTIONS = {"minPartitions", "maxRecordsPerPartition"}
# Options of Spark's Kafka connector that mean nothing to this reader.
CONNECTOR_ONLY_OPTIONS = {
    "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "includeHeaders",
    "groupIdPrefix",
}
# Set by the source itself: a spec cannot change what range is read.
RESERVED_OPTIONS = {
    "assign", "subscribe", "subscribePattern", "startingOffsets", "endingOffsets", "startingTimestamp",
    "endingTimestamp", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "failOnDataLoss",
    "maxOffsetsPerTrigger",
}


@dataclass(frozen=True)
class SourceOptions:
    """``spec.source.kafka.options`` and the Secret, split into client settings and planning options."""

    client: ClientSettings
    min_units: int = 0
    max_unit_offsets: int | None = None


def source_options(bootstrap_servers: str, options: dict[str, str], secret: dict[str, str],
                   field_path: str) -> SourceOptions:
    """Client settings (see :func:`client_settings`) and the planning options; a spec error names
    every refused key."""
    problems: list[str] = []
    resolved = resolve_env(options, field_path)
    client_options: dict[str, str] = {}
    planning: dict[str, int] = {}
    for key, value in resolved.items():
        if key in RESERVED_OPTIONS:
            problems.append(f"{field_path}.{key}: set by icebergsync itself (the table holds the offsets)")
        elif key in CONNECTOR_ONLY_OPTIONS:
            problems.append(f"{field_path}.{key}: an option of Spark's Kafka connector, which this source does "
                            "not use (it reads with confluent-kafka); remove it")
        elif key in PLANNING_OPTIONS:
            if not value.isdigit() or int(value) < 1:
                problems.append(f"{field_path}.{key}: a positive integer, not {value!r}")
            else:
                planning[key] = int(value)
        else:
            client_options[key] = value
    for key in secret:
        if key in RESERVED_OPTIONS or key in CONNECTOR_ONLY_OPTIONS or key in PLANNING_OPTIONS:
            problems.append(f"secretRef.{key}: not a Kafka client setting")
    try:
        client = client_settings(bootstrap_servers, client_options, options,
                                 {k: v for k, v in secret.items() if k not in RESERVED_OPTIONS
                                  and k not in CONNECTOR_ONLY_OPTIONS and k not in PLANNING_OPTIONS}, field_path)
    except SpecError as error:
        problems.extend(error.problems)
        client = ClientSettings(bootstrap_servers)
    if problems:
        raise SpecError(problems)
    return SourceOptions(client, planning.get("minPartitions", 0), planning.get("maxRecordsPerPartition"))


def topic_partitions(frontier: Frontier) -> Offsets:
    """``{(topic, partition): offset}`` from a frontier."""
    return {(topic, int(p)): int(o) for topic, parts in frontier.items() for p, o in dict(parts).items()}


def as_frontier(offsets: Offsets) -> Frontier:
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def allocate(available: Offsets, limit: int) -> Offsets:
    """Split ``limit`` records over partitions in proportion to what each has (every record when it fits)."""
    total = sum(available.values())
    if total <= limit:
        return dict(available)
    share = {tp: available[tp] * limit // total for tp in available}
    left = limit - sum(share.values())
    for tp in sorted(available, key=lambda tp: available[tp] - share[tp], reverse=True):
        if left == 0:
            break
        if share[tp] < available[tp]:
            share[tp] += 1
            left -= 1
    return share


@dataclass(frozen=True)
class KafkaPending(Pending):
    """A planned range; ``starts`` is where each partition's read begins (past records the broker deleted)."""

    starts: dict[tuple[str, int], int] = field(default_factory=dict)
    log_ends: dict[tuple[str, int], int] = field(default_factory=dict)  # each partition's end when planned


class KafkaSource(Source):
    def __init__(self, spark: SparkSession, spec: IcebergSyncSpec):
        super().__init__(spark, spec)
        settings = self.spec.source.kafka
        assert settings is not None
        self.settings = settings
        self.topics = ([settings.topic] if isinstance(settings.topic, str) else list(settings.topic or []))
        secret = read_secret(settings.secret_ref)
        self.options = source_options(settings.bootstrap_servers, settings.options,
                                      {k: v for k, v in secret.items() if not k.startswith(REGISTRY_SECRET_PREFIX)},
                                      "spec.source.kafka.options")
        registry = settings.schema_registry
        self.registry = (RegistrySettings.of(registry.url, registry.options, secret, registry.retry_budget_seconds)
                         if registry is not None else None)
        self.lookup = OffsetLookup(self.options.client)
        self._reported: set[tuple[str, int, int, int]] = set()
        self._missing_topics_reported: set[str] = set()

    # -- planning -------------------------------------------------------------------------------

    def _partitions(self) -> list[tuple[str, int]]:
        if self.settings.pattern is not None:  # listed again at every poll: a topic created later is read too
            partitions = self.lookup.matching_partitions(self.settings.pattern)
            self.topics = sorted({topic for topic, _ in partitions})
            return _one_partition_if_keyless(self.spec, partitions)
        partitions = self.lookup.partitions(self.topics)
        for topic in self.topics:
            if not any(t == topic for t, _ in partitions) and topic not in self._missing_topics_reported:
                log.warning("kafka source: topic %r has no partitions (does it exist?); waiting for it", topic)
                self._missing_topics_reported.add(topic)
        return _one_partition_if_keyless(self.spec, partitions)

    def initial_frontier(self) -> Frontier:
        """Where a sink with no progress starts: ``{}`` (every partition from its earliest offset),
        the current end offsets (``latest``) or the spec's explicit offsets (-2 earliest, -1 latest)."""
        starting = self.settings.starting_offsets
        if starting == "earliest":
            return {}
        partitions = self._partitions()
        begin, end = self.lookup.offsets(partitions)
        if starting == "latest":
            return as_frontier(end)
        explicit = json.loads(starting)
        unknown = sorted(set(explicit) - set(self.topics))
        if unknown:
            raise SpecError([f"spec.source.kafka.startingOffsets: topics {unknown} are not in spec.source.kafka.topic"])
        offsets: Offsets = {}
        for (topic, partition), offset in topic_partitions(explicit).items():
            if (topic, partition) not in end:
                raise SpecError([f"spec.source.kafka.startingOffsets: {topic} has no partition {partition}"])
            offsets[(topic, partition)] = {-2: begin, -1: end}.get(offset, {}).get((topic, partition), offset)
        return as_frontier(offsets)

    @staticmethod
    def check_frontier(frontier: Frontier) -> None:
        for topic, partitions in frontier.items():
            if not isinstance(partitions, dict) or not all(
                isinstance(p, str) and p.isdigit() and isinstance(o, int) and not isinstance(o, bool) and o >= 0
                for p, o in partitions.items()
            ):
                raise ValueError(f'a kafka frontier is {{"<topic>": {{"<partition>": <offset ≥ 0>}}}}; {topic!r} is not')

    def pending(self, frontier: Frontier, max_bytes: int) -> Pending | None:
        try:
            partitions = self._partitions()
            begin, end = self.lookup.offsets(partitions)
        except (KafkaAccessError, SpecError):
            raise  # a wrong password or an untrusted certificate: waiting will not help
        except Exception as exc:  # the broker is unreachable or slow: try again at the next poll
            self._unreachable(exc)
            return None
        committed = topic_partitions(frontier)
        starts: Offsets = {}
        lost: dict[str, dict[str, list[int]]] = {}
        ahead: dict[str, dict[str, list[int]]] = {}
        for tp in partitions:
            position = committed.get(tp)
            if position is None:
                starts[tp] = begin[tp]  # a partition the table has not seen: from its first offset
            elif position < begin[tp]:
                starts[tp] = begin[tp]
                lost.setdefault(tp[0], {})[str(tp[1])] = [position, begin[tp]]
                key = (tp[0], tp[1], position, begin[tp])
                if key not in self._reported:
                    self._reported.add(key)
                    log.warning("kafka source: LOST %d record(s) of %s partition %d: offsets [%d, %d) were deleted "
                                "by the broker (retention) before they were synced; continuing at offset %d",
                                begin[tp] - position, tp[0], tp[1], position, begin[tp], begin[tp])
            elif position > end[tp]:
                starts[tp] = position  # the log is shorter than the table says (topic recreated?): wait, loudly
                ahead.setdefault(tp[0], {})[str(tp[1])] = [position, end[tp]]
                key = (tp[0], tp[1], position, -end[tp] - 1)
                if key not in self._reported:
                    self._reported.add(key)
                    log.warning("kafka source: %s partition %d ends at offset %d but the table holds records up to "
                                "offset %d (was the topic recreated?); records below %d will NOT be read",
                                tp[0], tp[1], end[tp], position, position)
            else:
                starts[tp] = position
        available = {tp: max(0, end[tp] - starts[tp]) for tp in partitions}
        limit = min(self.settings.max_records_per_trigger, max(1, max_bytes // ESTIMATED_BYTES_PER_RECORD))
        share = allocate(available, limit)
        records = sum(share.values())
        if records == 0:
            return None
        ends = dict(committed)
        ends.update({tp: starts[tp] + share[tp] for tp in partitions})
        notes: dict[str, Any] = {}
        if lost:
            notes["lost-offsets"] = lost
            notes["lost-records"] = sum(b - a for parts in lost.values() for a, b in parts.values())
        if ahead:
            notes["frontier-beyond-end"] = ahead
        return KafkaPending(
            end=as_frontier(ends),
            estimated_bytes=records * ESTIMATED_BYTES_PER_RECORD,
            lag=kafka_lag({tp: end[tp] for tp in partitions}, ends),
            notes=notes or None,
            starts=starts,
            log_ends=dict(end),
            full=records >= limit,
        )

    def within(self, pending: Pending, end: Offsets) -> KafkaPending:
        """``pending`` with each partition ending at ``end`` instead (narrowed or grown, never past the partition's
        end when planned nor below its start): the range :mod:`spark_app.sources.transactions` asks for."""
        assert isinstance(pending, KafkaPending)
        ends = topic_partitions(pending.end)
        for tp, offset in end.items():
            if tp in pending.starts:
                ends[tp] = max(pending.starts[tp], min(offset, pending.log_ends.get(tp, offset)))
        records = sum(ends[tp] - start for tp, start in pending.starts.items())
        return dataclasses.replace(
            pending, end=as_frontier(ends), estimated_bytes=records * ESTIMATED_BYTES_PER_RECORD,
            lag=kafka_lag(pending.log_ends, ends))

    def after_truncate(self, pending: Pending, owns: Callable[[str], bool] | None, truncate: Position) -> KafkaPending:
        """``pending`` with each partition of the table's topics read from the first event after the truncate when
        the table went past it, and at least up to that event (spark_app/sources/truncate_replay.py)."""
        assert isinstance(pending, KafkaPending)
        mine = [tp for tp in pending.starts if owns is None or owns(tp[0])]
        begin, latest = self.lookup.offsets(mine)
        starts, ends, log_ends = dict(pending.starts), topic_partitions(pending.end), dict(pending.log_ends)
        for topic, partition in mine:
            def read(start: int, end: int, topic: str = topic, partition: int = partition) -> Iterator[pa.RecordBatch]:
                return read_range(self.options.client, topic, partition, start, end)
            first = first_after(read, begin[(topic, partition)], latest[(topic, partition)], truncate)
            if first < pending.starts[(topic, partition)] and first == begin[(topic, partition)] > 0:
                log.warning("kafka source: %s partition %d holds no record before offset %d (retention): changes after "
                            "the truncate that the table held below it cannot be applied again", topic, partition, first)
            starts[(topic, partition)] = min(starts[(topic, partition)], first)
            ends[(topic, partition)] = max(ends[(topic, partition)], first)
            log_ends[(topic, partition)] = max(log_ends.get((topic, partition), 0), ends[(topic, partition)])
        records = sum(ends[tp] - start for tp, start in starts.items())
        return dataclasses.replace(pending, starts=starts, end=as_frontier(ends), log_ends=log_ends,
                                   estimated_bytes=records * ESTIMATED_BYTES_PER_RECORD)

    def streams(self) -> list[str] | None:
        try:
            self._partitions()
        except (KafkaAccessError, SpecError):
            raise
        except Exception as exc:  # the broker is unreachable or slow: the caller asks again
            self._unreachable(exc)
            return None
        return list(self.topics)

    def _unreachable(self, exc: Exception) -> None:
        log.warning("kafka source: cannot read the topics or offsets from %s: %s", self.settings.bootstrap_servers,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        self.lookup.close()

    def stream_of(self, unit: WorkUnit) -> str:
        assert isinstance(unit, KafkaUnit)
        return unit.topic

    def backlog(self, frontier: Frontier, pending: Pending | None,
                owns: Callable[[str], bool] | None = None) -> dict[str, Any]:
        """Each partition's end offset minus where its next read starts (the frontier, or the first offset the
        broker still holds), summed (:func:`icebergsync.metrics.lag.kafka_lag`)."""
        if not isinstance(pending, KafkaPending):
            return {"records": 0, "partitions": {}}
        ends = {tp: end for tp, end in pending.log_ends.items() if owns is None or owns(tp[0])}
        return kafka_lag(ends, pending.starts)

    def restricted(self, pending: Pending, owns: Callable[[str], bool]) -> Pending:
        lag = pending.lag
        if lag is not None:
            lag = partitions_lag({topic: parts for topic, parts in lag["partitions"].items() if owns(topic)})
        notes = dict(pending.notes or {})
        for name in ("lost-offsets", "frontier-beyond-end"):
            if name in notes:
                notes[name] = {topic: parts for topic, parts in notes[name].items() if owns(topic)} or None
        if "lost-records" in notes:
            lost = notes.get("lost-offsets") or {}
            notes["lost-records"] = sum(b - a for parts in lost.values() for a, b in parts.values())
        return dataclasses.replace(pending, lag=lag, notes={k: v for k, v in notes.items() if v} or None)

    # -- planning units ---------------------------------------------------------------------------

    @staticmethod
    def _ranges(pending: Pending) -> dict[tuple[str, int], tuple[int, int]]:
        assert isinstance(pending, KafkaPending)
        ends = topic_partitions(pending.end)
        return {tp: (start, ends[tp]) for tp, start in sorted(pending.starts.items()) if ends[tp] > start}

    def plan_units(self, frontier: Frontier, pending: Pending) -> list[WorkUnit]:
        """One unit per partition range; ranges split into equal parts when that gives every core work
        (never below ``MIN_UNIT_OFFSETS`` offsets a unit for that reason) and at least ``minPartitions``
        units, at most ``maxRecordsPerPartition`` offsets a unit."""
        ranges = self._ranges(pending)
        splits = split_ranges(ranges, max(self.cores(), self.options.min_units), self.options.max_unit_offsets,
                              min_split=1 if self.options.min_units else MIN_UNIT_OFFSETS)
        return [KafkaUnit(index, topic, partition, start, end)
                for index, (topic, partition, start, end) in enumerate(splits)]

    def unit_reader(self, columns: list[SpecColumn], key: list[str] | None = None,
                    truncated_at: Position | None = None) -> KafkaUnitReader:
        if self.registry is not None:
            required = frozenset(column.name for column in columns if column.required)
            table = TableColumns({column.name: column.type for column in columns}, required, frozenset(key or []),
                                 self.spec.follows_source_schema)
            return KafkaUnitReader(self.options.client, list(columns), self.settings.format, registry=self.registry,
                                   table=table)
        reading = ChangeReading.of(self.spec, columns, key, truncated_at)
        return KafkaUnitReader(self.options.client, list(columns), self.settings.format, reading)


def _one_partition_if_keyless(spec: IcebergSyncSpec, partitions: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """``partitions``; ``SpecError`` when a topic of a table without a primary key has more than one: Debezium sends
    such a table's events with a null message key, spread over the partitions, so their order would be lost (a
    delete read before the insert it removes)."""
    counts = Counter(topic for topic, _ in partitions)
    split = sorted(topic for topic, count in counts.items() if count > 1 and spec.keyless_stream(topic))
    if split:
        raise SpecError([f"spec.source.kafka: topic {split[0]} has {counts[split[0]]} partitions, but its table has "
                         "no primary key (key: []), whose events Debezium sends with a null message key to any "
                         "partition, out of order: use a topic of one partition (docs/connectors.md, \"Tables "
                         "without a primary key\")"])
    return partitions


def split_ranges(ranges: dict[tuple[str, int], tuple[int, int]], target: int, max_offsets: int | None,
                 min_split: int = MIN_UNIT_OFFSETS) -> list[tuple[str, int, int, int]]:
    """``(topic, partition, start, end)`` parts of ``ranges`` in source order: each range in
    ``ceil(share of target)`` equal parts, a part never below ``min_split`` offsets for that reason,
    never above ``max_offsets``."""
    total = sum(end - start for start, end in ranges.values())
    parts: list[tuple[str, int, int, int]] = []
    for (topic, partition), (start, end) in sorted(ranges.items()):
        size = end - start
        count = 1
        if total > 0:  # its share of the cores, rounded up
            count = max(1, min(-(-size * target // total), size // max(1, min_split)))
        if max_offsets is not None:
            count = max(count, -(-size // max_offsets))
        count = min(count, size)
        bounds = [start + size * i // count for i in range(count + 1)]
        parts.extend((topic, partition, lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo)
    return parts


def _record_positions(topic: str, partition: int, offsets: pa.Array | pa.ChunkedArray) -> Callable[[int], dict[str, Any]]:
    """Position of record ``i`` of a batch (for its dead letter): ``{"topic", "partition", "offset"}``."""
    return lambda i: {"topic": topic, "partition": partition, "offset": offsets[i].as_py()}


def positions(topic: str, partition: int, offsets: pa.Array) -> pa.Array:
    """Each record's ``_isync_position``: ``{"topic": ..., "partition": p, "offset": o}`` as JSON."""
    prefix = json.dumps({"topic": topic, "partition": partition})[:-1] + ', "offset": '
    return pc.binary_join_element_wise(prefix, pc.cast(offsets, pa.string()), "}", "")


@dataclass(frozen=True)
class KafkaUnitReader:
    """The tasks' reader of :class:`KafkaUnit` s (picklable): the unit's exact range
    (:func:`read_range`), decoded by :func:`spark_app.decoding.arrow_decode.decode_json_values`, or, for a
    keyed sync (``changes``), by :func:`spark_app.decoding.changes.decode_changes` with the message keys (the
    upsert format's tombstones delete the message key's row). A unit's records are in offset order:
    the ``i``-th record read is ordered ``order_base(unit) + i``."""

    client: ClientSettings
    columns: list[SpecColumn]
    format: str = "json"
    changes: ChangeReading | None = None
    registry: RegistrySettings | None = None  # format avro: where the records' schemas are
    table: TableColumns | None = None  # format avro: the table's columns the records' schemas are compared with

    def __call__(self, unit: WorkUnit, stats: UnitStats) -> Iterator[pa.RecordBatch]:

        assert isinstance(unit, KafkaUnit), unit
        schema = target_schema(self.columns)
        counts = RangeCounts()
        read = 0
        for raw in read_range(self.client, unit.topic, unit.partition, unit.start, unit.end, counts):
            offsets = raw.column("offset")
            if self.changes is not None:
                transactions: list[tuple[int, str]] | None = [] if self.changes.transactions else None
                yield from self.changes.decode_records(raw.column("value"), raw.column("key"),
                                                       _record_positions(unit.topic, unit.partition, offsets),
                                                       order_base(unit) + read, stats, transactions).to_batches()
                read += raw.num_rows
                if transactions:
                    offset_list = offsets.to_pylist()
                    for index, transaction in transactions:
                        stats.saw_transaction(unit.topic, unit.partition, transaction, offset_list[index],
                                              offset_list[index])
                continue
            positions = _record_positions(unit.topic, unit.partition, offsets)
            if self.registry is not None and self.table is not None:
                yield from decode_registry_values(raw.column("value"), schema, self.table, self.registry, self.format,
                                                  positions, stats.drift).to_batches()
                continue
            yield from decode_json_values(raw.column("value"), schema, positions).to_batches()
        if counts.offsets_without_records:
            stats.add("offsets-without-records", counts.offsets_without_records)
