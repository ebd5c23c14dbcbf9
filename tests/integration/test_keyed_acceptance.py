"""Acceptance of keyed syncs: a Debezium-style change stream through the real job, killed -9 again and again.

A random change stream (inserts, updates that move a row to another day partition, deletes,
re-inserts, key changes, tombstones and broken lines; tests/integration/keyed_support.py) goes
through ``icebergsync run`` processes via (a) change files and (b) a real Kafka broker, in the
Debezium format and in the upsert format with tombstones keyed by the message key, on a topic of
several partitions with records partitioned by key as Debezium's producer does. Each process is
SIGKILLed (the whole process group: driver, JVM, Python workers) at a random moment — a random
delay after the table moved on, at a random time from the start (often before or during the fence),
or at a protocol point (after staging, between the main and the dead-letter commit) — and restarted
with the same or a higher sink version. After every kill Apache Iceberg's own Spark runtime reads
the table, which must equal the model of exactly the changes its frontier covers; at the end it must
equal the model of the whole stream, and the dead-letter table must hold each broken record once,
at its position.

Size: ``ICEBERGSYNC_KEYED_CHANGES`` changes (default 10,000, over a tenth as many keys) and
``ICEBERGSYNC_KEYED_KILLS`` kills per run (default 3; the fourth and later add random-time kills). The full-size run is 200,000 changes over
20,000 keys: ``ICEBERGSYNC_KEYED_CHANGES=200000``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer as ClientProducer
from pyiceberg.exceptions import NoSuchTableError
from pyspark.sql import SparkSession

from icebergsync.spec import parse_spec
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import kafka_source, new_topic
from tests.integration.keyed_support import SCHEMA, ChangeStream, Emitted, prefix_model, spark_rows
from tests.integration.sync_support import (
    catalog_of,
    holds,
    job_process,
    run_job_process,
    sink_commits,
    sync_document,
    unreferenced_sink_files,
    write_spec,
)

CHANGES = int(os.environ.get("ICEBERGSYNC_KEYED_CHANGES", "10000"))
KEYS = max(100, CHANGES // 10)
KILLS = int(os.environ.get("ICEBERGSYNC_KEYED_KILLS", "3"))
TRIGGERS = 20  # about this many triggers over the stream
FILES = 2 * TRIGGERS
PARTITIONS = 4
SINK = "test/orders"
DEAD_LETTERS = "sales.orders_dlq"
# How each kill is chosen, in turn: after the table moved on (a random delay later), at a random
# time from the start, or at a protocol point of spark_app/faults.py.
KILL_PLAN: list[tuple[str, str | None]] = [
    ("progress", None), ("crash", "main-committed:1"), ("crash", "staged:2"), ("random", None),
    ("progress", None), ("random", None), ("progress", None), ("progress", None),
]


def keyed_document(tmp_path: Path, source: dict[str, Any], fmt: str, **spec: Any) -> dict[str, Any]:
    return sync_document(tmp_path, source, schema=SCHEMA, table={"key": ["id"], "partitionBy": ["day(updated_at)"]},
                         changes={"format": fmt}, deadLetter={"table": DEAD_LETTERS},
                         commit={"interval": "500ms", "pollInterval": "200ms", "targetFileSize": "8Mi"}, **spec)


def kill_job(spec_path: Path, version: int, how: str, crash_at: str | None, moved: Callable[[], bool],
             rng: random.Random, timeout: float = 300) -> tuple[int, str]:
    """Run ``icebergsync run`` and SIGKILL its process group: a random 0-3 s after ``moved()`` holds (a trigger's data landed)
    (``progress``), at a random 2-15 s from the start (``random``), or at ``crash_at`` (the job kills
    itself; ``moved()`` holding first means the point was not reached in time and the group is killed)."""
    kill_at = time.monotonic() + rng.uniform(2, 15) if how == "random" else None
    with job_process(spec_path, version, crash_at) as (process, output):
        deadline = time.monotonic() + timeout
        while process.poll() is None:
            assert time.monotonic() < deadline, f"job v{version} ran {timeout}s:\n{output.read_text()[-3000:]}"
            if kill_at is None and holds(moved):
                # progress: a random moment of the next trigger(s); crash: the point comes right after
                kill_at = time.monotonic() + (rng.uniform(0, 3) if how == "progress" else 30)
            if kill_at is not None and time.monotonic() >= kill_at:
                os.killpg(process.pid, signal.SIGKILL)
            time.sleep(0.1)
    return process.returncode, output.read_text()


def run_with_kills(spark: SparkSession, tmp_path: Path, document: dict[str, Any], stream: ChangeStream,
                   covered_by: Callable[[dict[str, Any] | None], Callable[[int, Emitted], bool]],
                   finished: Callable[[dict[str, Any] | None], bool], positions: dict[tuple[Any, ...], int],
                   position_of: Callable[[dict[str, Any]], tuple[Any, ...]], seed: str) -> None:
    """Kill and restart the job ``KILLS`` times, checking the table after each kill, then run it to the end."""
    spec_path = write_spec(tmp_path, document)
    catalog = catalog_of(parse_spec(document))
    rng = random.Random(seed)

    def commits() -> list[Any]:
        try:
            return sink_commits(catalog.load_table("sales.orders"), SINK)
        except NoSuchTableError:  # killed before the first fence created it
            return []

    version = 1
    for round_ in range(KILLS):
        how, crash_at = KILL_PLAN[round_ % len(KILL_PLAN)]
        if round_ and rng.random() < 0.5:
            version += 1  # else the same version restarts
        seen = sum(1 for c in commits() if c.kind == "data")

        def moved(seen: int = seen) -> bool:  # a trigger's data landed since this run started
            landed = commits()
            return sum(1 for c in landed if c.kind == "data") > seen or finished(last_frontier(landed))

        status, log = kill_job(spec_path, version, how, crash_at, moved, rng)
        assert status == -9, f"run v{version} ({how} {crash_at or ''}) ended {status}:\n{log[-3000:]}"
        landed = commits()
        frontier = landed[-1].frontier if landed else None
        if landed:  # exactly what the frontier covers, never more, never twice
            expected = prefix_model(stream, covered_by(frontier))
            assert spark_rows(spark, catalog.load_table("sales.orders")) == expected, (
                f"after kill {round_} ({how} {crash_at or ''}, v{version}) at frontier {frontier}")
    version += 1
    status, log = run_job_process(spec_path, version, stop_when=lambda: finished(last_frontier(commits())),
                                  timeout=900)
    assert status == 0, log[-3000:]
    table = catalog.load_table("sales.orders")
    assert finished(last_frontier(commits()))
    assert spark_rows(spark, table) == stream.model
    assert unreferenced_sink_files(table, SINK) == [], "staged files of killed attempts were left behind"
    assert commits()[-1].writer.version == version
    dead = catalog.load_table(DEAD_LETTERS).scan(selected_fields=("position",)).to_arrow()
    found: dict[tuple[Any, ...], int] = {}
    for text in dead.column("position").to_pylist():
        where = position_of(json.loads(text))
        found[where] = found.get(where, 0) + 1
    assert dead.num_rows == stream.dead == len(positions)
    assert found == positions, "dead letters differ from the broken records (each once, at its position)"


def last_frontier(landed: list[Any]) -> dict[str, Any] | None:
    return landed[-1].frontier if landed else None


def produce(broker: KafkaBroker, topic: str, records: list[Emitted]) -> list[tuple[int, int]]:
    """Produce ``records`` in order (idempotent, acks=all) to their partitions; each one's (partition, offset)."""
    producer = ClientProducer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True,
                               "linger.ms": 20})
    placed: list[tuple[int, int] | None] = [None] * len(records)
    errors: list[str] = []

    def delivered(index: int) -> Callable[[Any, Any], None]:
        def report(error: Any, message: Any) -> None:
            if error is not None:
                errors.append(str(error))
            else:
                placed[index] = (message.partition(), message.offset())
        return report

    for index, record in enumerate(records):
        assert record.partition is not None
        while True:
            try:
                producer.produce(topic, value=record.value, key=record.key, partition=record.partition,
                                 on_delivery=delivered(index))
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(300) == 0, "records still undelivered after 300 s"
    assert not errors, errors[:5]
    assert all(where is not None for where in placed)
    return [where for where in placed if where is not None]


def make_stream(fmt: str, seed: str, partitions: int | None) -> ChangeStream:
    stream = ChangeStream(fmt, random.Random(seed), max_keys=KEYS, partitions=partitions)
    stream.records(CHANGES)
    assert len(stream.model) > KEYS // 4 and stream.dead > 0
    return stream


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["debezium", "upsert"])
def test_change_files_exactly_once_across_kill_9(tmp_path: Path, spark: SparkSession, fmt: str) -> None:
    seed = f"acceptance-files-{fmt}"
    stream = make_stream(fmt, seed, None)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    bounds = [len(stream.emitted) * i // FILES for i in range(FILES + 1)]
    names = [f"{number:05d}.json" for number in range(FILES)]
    ends: dict[str, int] = {}  # file name -> index of its first record after it
    positions: dict[tuple[Any, ...], int] = {}
    for name, lo, hi in zip(names, bounds, bounds[1:], strict=False):
        records = stream.emitted[lo:hi]
        (inbox / name).write_bytes(b"".join(record.file_line() + b"\n" for record in records))
        ends[name] = hi
        positions.update({(name, line): 1 for line, record in enumerate(records, 1) if record.broken})

    def covered_by(frontier: dict[str, Any] | None) -> Callable[[int, Emitted], bool]:
        after = (frontier or {}).get("after")
        end = ends[after] if after else 0
        return lambda index, _: index < end

    document = keyed_document(tmp_path, {"files": {"path": str(inbox), "maxFilesPerTrigger": FILES // TRIGGERS}}, fmt)
    run_with_kills(spark, tmp_path, document, stream, covered_by,
                   lambda frontier: frontier == {"after": names[-1]}, positions,
                   lambda where: (where["file"].rsplit("/", 1)[-1], where["line"]), seed)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["debezium", "upsert"])
def test_kafka_changes_exactly_once_across_kill_9(tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker,
                                                  fmt: str) -> None:
    seed = f"acceptance-kafka-{fmt}"
    stream = make_stream(fmt, seed, PARTITIONS)
    topic = new_topic(kafka_broker, PARTITIONS, prefix=f"cdc-{fmt}")
    placed = produce(kafka_broker, topic, stream.emitted)
    assert [p for p, _ in placed] == [r.partition for r in stream.emitted]
    if fmt == "upsert":  # deletes by message key with no value are in the stream
        assert any(r.value is None and r.effects for r in stream.emitted)
    ends = {p: 0 for p in range(PARTITIONS)}
    for partition, offset in placed:
        ends[partition] = max(ends[partition], offset + 1)
    positions = {(topic, p, o): 1 for (p, o), r in zip(placed, stream.emitted, strict=True) if r.broken}

    def covered_by(frontier: dict[str, Any] | None) -> Callable[[int, Emitted], bool]:
        offsets = {int(p): int(o) for p, o in ((frontier or {}).get(topic) or {}).items()}
        return lambda index, _: placed[index][1] < offsets.get(placed[index][0], 0)

    def finished(frontier: dict[str, Any] | None) -> bool:
        return frontier is not None and frontier.get(topic) == {str(p): o for p, o in ends.items()}

    source = kafka_source(kafka_broker, topic, maxRecordsPerTrigger=max(500, len(stream.emitted) // TRIGGERS))
    document = keyed_document(tmp_path, source, fmt)
    run_with_kills(spark, tmp_path, document, stream, covered_by, finished, positions,
                   lambda where: (where["topic"], where["partition"], where["offset"]), seed)
