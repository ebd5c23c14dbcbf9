"""Kafka topics through Spark's Kafka connector in batch mode; progress lives only in the table.

Frontier: ``{"<topic>": {"<partition>": next_offset}}`` — every record of a listed partition below
its offset is in the table. Each trigger reads exactly ``[frontier, end)`` with explicit
``startingOffsets``/``endingOffsets`` (``assign``), so there is no Spark checkpoint and nothing is
committed to Kafka: the connector reads with a throwaway group id and never commits offsets.

* The range's ends are checked against the records the executors staged (the Kafka ``partition``
  and ``offset`` columns, gathered in the same pass with ``Dataset.observe``): no record outside the
  range, and offsets inside it that carry no record (compaction, transaction markers) are counted
  in the commit's ``icebergsync.source-notes``.
* Transactions: both the offset lookup and the reader use ``isolation.level=read_committed``, so
  records of aborted transactions are never read, and the end offset of a partition is its last
  stable offset: an open transaction holds the frontier back until it commits or aborts. Aborted
  records and commit markers are offsets without records (gaps) inside a range, never data loss.
  ``options: {kafka.isolation.level: read_uncommitted}`` reads everything instead.
* A partition missing from the frontier (added to the topic later, or never seen) starts at its
  earliest offset.
* A frontier offset below the partition's earliest offset means the broker deleted records the
  table never got (retention): one WARNING line names topic, partition and the lost range, and the
  commit that moves past it records it under ``lost-offsets`` in its source notes.
* Lag: per-partition end offset minus the committed end, in ``icebergsync.source-lag``.

Offsets are looked up on the driver with a ``KafkaConsumer`` (kafka-clients, which the connector
brings) through py4j, configured with the same ``kafka.*`` options as the reader.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from icebergsync.catalog import read_secret, resolve_env
from icebergsync.errors import IcebergSyncError, SpecError
from icebergsync.protocol import Frontier
from icebergsync.spec import IcebergSyncSpec
from spark_app.decode import decode_json
from spark_app.sources.base import Pending, Source, SourceBatch

log = logging.getLogger("icebergsync.source.kafka")

ESTIMATED_BYTES_PER_RECORD = 64  # staged Parquet bytes per decoded record: only sizes triggers and tasks
OFFSET_TIMEOUT_SECONDS = 60
METADATA_MAX_AGE_MS = "10000"  # how soon a partition added to a topic is seen (Kafka's default is 5 min)
OBSERVATION_WAIT_SECONDS = 120.0
# Records of aborted or still open transactions are never read; the end offsets are the last stable offsets.
ISOLATION_LEVEL = "read_committed"
# Options of Spark's Kafka source (not consumer settings) a spec may pass through.
SPARK_OPTIONS = {
    "minPartitions", "maxRecordsPerPartition", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs", "includeHeaders", "groupIdPrefix",
}
# Set by the source itself: a spec cannot change what range is read.
RESERVED_OPTIONS = {
    "assign", "subscribe", "subscribePattern", "startingOffsets", "endingOffsets", "startingTimestamp",
    "endingTimestamp", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "failOnDataLoss",
    "maxOffsetsPerTrigger", "kafka.bootstrap.servers", "kafka.enable.auto.commit", "kafka.key.deserializer",
    "kafka.value.deserializer", "kafka.auto.offset.reset", "kafka.group.id", "kafka.interceptor.classes",
}
# Decoders by spec.source.kafka.format: (frame, raw column, declared columns, position) -> decoded frame.
DECODERS: dict[str, Callable[..., DataFrame]] = {"json": decode_json}

Offsets = dict[tuple[str, int], int]


def reader_options(options: dict[str, str], secret: dict[str, str], field_path: str) -> dict[str, str]:
    """The connector options from the spec's ``options`` and the mounted secret's keys.

    Keys starting with ``kafka.`` and bare consumer settings (``security.protocol``) are consumer
    settings (the connector wants them as ``kafka.<setting>``); Spark source options pass as they are.
    """
    merged: dict[str, str] = {}
    problems = []
    for source, values in ((field_path, resolve_env(options, field_path)), ("secretRef", secret)):
        for key, value in values.items():
            name = key if key.startswith("kafka.") or key in SPARK_OPTIONS else f"kafka.{key}"
            if key in RESERVED_OPTIONS or name in RESERVED_OPTIONS:
                problems.append(f"{source}.{key}: set by icebergsync itself (the table holds the offsets)")
            merged[name] = value
    if problems:
        raise SpecError(problems)
    return merged


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


class OffsetLookup:
    """Partitions and earliest/latest offsets, from a KafkaConsumer in the driver JVM (no group, no commits)."""

    def __init__(self, spark: Any, bootstrap: str, options: dict[str, str]):
        self._jvm = spark.sparkContext._jvm
        self._settings = {
            "metadata.max.age.ms": METADATA_MAX_AGE_MS,
            "isolation.level": ISOLATION_LEVEL,
            **{key.removeprefix("kafka."): value for key, value in options.items() if key.startswith("kafka.")},
            "bootstrap.servers": bootstrap,
            "enable.auto.commit": "false",
            "key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
            "value.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
        }
        self._consumer: Any = None

    def _open(self) -> Any:
        if self._consumer is None:
            try:
                properties = self._jvm.java.util.Properties()
                for key, value in self._settings.items():
                    properties.setProperty(key, value)
                self._consumer = self._jvm.org.apache.kafka.clients.consumer.KafkaConsumer(properties)
            except TypeError as exc:  # py4j: an unknown class is a JavaPackage, which is not callable
                if "JavaPackage" not in str(exc):
                    raise
                raise IcebergSyncError(
                    "the Kafka connector is not on the Spark classpath (org.apache.spark:spark-sql-kafka-0-10_2.13 "
                    "and kafka-clients); see docs/connectors.md") from exc
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            try:
                consumer.close()
            except Exception:  # closing a broken consumer is best effort
                log.debug("closing the offset consumer failed", exc_info=True)

    def _timeout(self) -> Any:
        return self._jvm.java.time.Duration.ofSeconds(OFFSET_TIMEOUT_SECONDS)

    def partitions(self, topics: list[str]) -> list[tuple[str, int]]:
        consumer = self._open()
        found: list[tuple[str, int]] = []
        for topic in topics:
            infos = consumer.partitionsFor(topic, self._timeout())
            found.extend((topic, int(info.partition())) for info in (infos or []))
        return sorted(found)

    def offsets(self, partitions: list[tuple[str, int]]) -> tuple[Offsets, Offsets]:
        """(earliest, latest) offset of each partition."""
        consumer = self._open()
        java_partitions = {tp: self._jvm.org.apache.kafka.common.TopicPartition(tp[0], tp[1]) for tp in partitions}
        collection = self._jvm.java.util.ArrayList()
        for java_tp in java_partitions.values():
            collection.add(java_tp)
        begin = consumer.beginningOffsets(collection, self._timeout())
        end = consumer.endOffsets(collection, self._timeout())
        return ({tp: int(begin.get(j)) for tp, j in java_partitions.items()},
                {tp: int(end.get(j)) for tp, j in java_partitions.items()})


class KafkaSource(Source):
    def __init__(self, spark: SparkSession, spec: IcebergSyncSpec):
        super().__init__(spark, spec)
        settings = self.spec.source.kafka
        assert settings is not None
        self.settings = settings
        self.topics = [settings.topic] if isinstance(settings.topic, str) else list(settings.topic)
        self.options = reader_options(settings.options, read_secret(settings.secret_ref), "spec.source.kafka.options")
        if settings.format not in DECODERS:
            raise SpecError([f"spec.source.kafka.format: {settings.format!r} has no decoder (known: {sorted(DECODERS)})"])
        self.lookup = OffsetLookup(self.spark, settings.bootstrap_servers, self.options)
        self._reported: set[tuple[str, int, int, int]] = set()
        self._missing_topics_reported: set[str] = set()

    # -- planning -------------------------------------------------------------------------------

    def _partitions(self) -> list[tuple[str, int]]:
        partitions = self.lookup.partitions(self.topics)
        for topic in self.topics:
            if not any(t == topic for t, _ in partitions) and topic not in self._missing_topics_reported:
                log.warning("kafka source: topic %r has no partitions (does it exist?); waiting for it", topic)
                self._missing_topics_reported.add(topic)
        return partitions

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
        except IcebergSyncError:
            raise
        except Exception as exc:  # the broker is unreachable or slow: try again at the next poll
            log.warning("kafka source: cannot read offsets from %s: %s", self.settings.bootstrap_servers,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            self.lookup.close()
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
        lag_by_partition = {tp: end[tp] - ends[tp] for tp in partitions}
        notes: dict[str, Any] = {}
        if lost:
            notes["lost-offsets"] = lost
            notes["lost-records"] = sum(b - a for parts in lost.values() for a, b in parts.values())
        if ahead:
            notes["frontier-beyond-end"] = ahead
        return KafkaPending(
            end=as_frontier(ends),
            estimated_bytes=records * ESTIMATED_BYTES_PER_RECORD,
            lag={"records": sum(max(0, lag) for lag in lag_by_partition.values()),
                 "partitions": as_frontier(lag_by_partition)},
            notes=notes or None,
            starts=starts,
        )

    # -- reading --------------------------------------------------------------------------------

    def read(self, frontier: Frontier, pending: Pending) -> SourceBatch:
        assert isinstance(pending, KafkaPending)
        ends = topic_partitions(pending.end)
        ranges = {tp: (start, ends[tp]) for tp, start in pending.starts.items() if ends[tp] > start}
        assign: dict[str, list[int]] = {}
        for topic, partition in sorted(ranges):
            assign.setdefault(topic, []).append(partition)
        raw = (
            self.spark.read.format("kafka")
            .option("kafka.bootstrap.servers", self.settings.bootstrap_servers)
            .option("kafka.isolation.level", ISOLATION_LEVEL)
            .options(**self.options)
            .option("assign", json.dumps(assign))
            .option("startingOffsets", json.dumps(as_frontier({tp: r[0] for tp, r in ranges.items()})))
            .option("endingOffsets", json.dumps(as_frontier({tp: r[1] for tp, r in ranges.items()})))
            .option("failOnDataLoss", "true")  # a record deleted between planning and reading fails the trigger
            .load()
        )
        order = sorted(ranges)
        observation = Observation(f"isync-kafka-{uuid.uuid4().hex}")
        raw = raw.observe(observation, F.count(F.lit(1)).alias("rows"), *self._range_metrics(order))
        position = F.to_json(F.struct(F.col("topic"), F.col("partition"), F.col("offset")))
        frame = DECODERS[self.settings.format](raw, "value", list(self.spec.schema_), position)
        batch = SourceBatch(frame=frame, end=pending.end, lag=pending.lag, notes=dict(pending.notes or {}) or None)
        batch.verify = lambda: self._verify(batch, observation, order, ranges)
        return batch

    @staticmethod
    def _range_metrics(order: list[tuple[str, int]]) -> list[Column]:
        metrics = []
        for index, (topic, partition) in enumerate(order):
            mine = (F.col("topic") == topic) & (F.col("partition") == partition)
            metrics += [F.count(F.when(mine, 1)).alias(f"n{index}"),
                        F.min(F.when(mine, F.col("offset"))).alias(f"lo{index}"),
                        F.max(F.when(mine, F.col("offset"))).alias(f"hi{index}")]
        return metrics

    def _verify(self, batch: SourceBatch, observation: Observation, order: list[tuple[str, int]],
                ranges: dict[tuple[str, int], tuple[int, int]]) -> None:
        """Check the staged records against the planned range before the commit states it."""
        metrics = _observed(observation)
        problems, empty_offsets = [], 0
        for index, tp in enumerate(order):
            start, end = ranges[tp]
            count, low, high = int(metrics[f"n{index}"]), metrics[f"lo{index}"], metrics[f"hi{index}"]
            if count > end - start or (count and (low < start or high >= end)):
                problems.append(f"{tp[0]}/{tp[1]}: read {count} record(s) at offsets [{low}, {high}] "
                                f"for the range [{start}, {end})")
            empty_offsets += (end - start) - count
        outside = int(metrics["rows"]) - sum(int(metrics[f"n{i}"]) for i in range(len(order)))
        if outside:
            problems.append(f"{outside} record(s) from partitions that were not planned")
        if problems:
            raise IcebergSyncError("kafka source: the records read do not match the planned range; nothing is "
                                   "committed: " + "; ".join(problems))
        if empty_offsets:
            # Compacted-away records and transaction markers hold offsets but no record.
            batch.notes = {**(batch.notes or {}), "offsets-without-records": empty_offsets}


def _observed(observation: Observation) -> dict[str, Any]:
    """The observation's metrics; they arrive with the action that ran the range (wait briefly)."""
    java = observation._jo
    assert java is not None
    deadline = time.monotonic() + OBSERVATION_WAIT_SECONDS
    while not java.future().isCompleted():
        if time.monotonic() > deadline:
            raise IcebergSyncError("kafka source: the read's offset metrics never arrived; nothing is committed")
        time.sleep(0.01)
    return observation.get
