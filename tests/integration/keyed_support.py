"""Helpers for the keyed-table tests: a random change stream with its reference model, a keyed sync of
it through the job, and the table as each reader reads it (Apache Iceberg's own Spark runtime,
pyiceberg, chdb).

:class:`ChangeStream` writes Debezium change events or upsert-format rows (inserts, updates that move
a row to another day, deletes, re-inserts, key changes, tombstones and broken records) and keeps the
model (key -> row) they lead to. Every emitted record is also kept in :attr:`ChangeStream.emitted`
with its effect on the model, so that the model of any prefix (what a frontier covers) can be
rebuilt. With ``partitions`` set the records are placed as Debezium places them on Kafka: partitioned
by the message key (Kafka's default partitioner, murmur2 of the key bytes), so every change of a key
is in one partition; a key change between partitions is sent as Debezium sends it (a delete of the
old key and its tombstone in the old key's partition, a create of the new key in its own).
"""

from __future__ import annotations

import contextlib
import json
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from icebergsync.spec import Column
from icebergsync.storage import normalize
from spark_app.iceberg.internals import is_deletion_vector, live_files
from spark_app.job.loop import SyncJob
from tests.integration.sync_support import BackgroundJob, catalog_of, make_sync, sink_commits

COLUMNS = [Column(name="id", type="long", required=True), Column(name="name", type="string"),
           Column(name="updated_at", type="timestamptz")]
SCHEMA = [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"},
          {"name": "updated_at", "type": "timestamptz"}]
KEY = ["id"]
START = datetime(2025, 3, 1, tzinfo=UTC)
OFFSETS = [UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-7))]

Row = tuple[str, int]  # (name, updated_at in µs since the epoch)
Effect = tuple[int, Row | None]  # key -> its new row, or None: deleted


def micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the default partitioner's hash of a record key), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (what Debezium uses) gives a record with this key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class Emitted:
    """One record of the stream: its value and message key (None: a tombstone / no key), its Kafka
    partition (when partitioned), whether it is broken (a dead letter), and what it does to the model."""

    value: bytes | None
    key: bytes | None
    partition: int | None
    broken: bool
    effects: tuple[Effect, ...]

    def file_line(self) -> bytes:
        """The record as a line of a change file: an upsert-format delete by message key has no file
        form, so it becomes the row's key with ``__deleted: true``; a Debezium tombstone is ``null``."""
        if self.value is None and self.key is not None and not self.broken and self.effects:
            return json.dumps({**json.loads(self.key), "__deleted": True}).encode()
        return self.value or b"null"


@dataclass
class ChangeStream:
    """Random change records (Debezium or upsert format) and the reference model they lead to.

    ``max_keys`` bounds the key space (new keys come from ``range(max_keys)``); ``partitions`` places
    records on Kafka partitions by message key (see the module doc).
    """

    fmt: str
    rng: random.Random
    model: dict[int, Row] = field(default_factory=dict)
    next_key: int = 0
    dead: int = 0
    max_keys: int | None = None
    partitions: int | None = None
    emitted: list[Emitted] = field(default_factory=list)
    _live: list[int] = field(default_factory=list)  # the model's keys, for a random choice in O(1)
    _slot: dict[int, int] = field(default_factory=dict)
    _live_of: int = 0  # id() of the model _live lists

    def _set(self, key: int, row: Row | None) -> None:
        if row is None:
            del self.model[key]
            slot, last = self._slot.pop(key), self._live.pop()
            if last != key:
                self._live[slot] = last
                self._slot[last] = slot
        else:
            if key not in self.model:
                self._slot[key] = len(self._live)
                self._live.append(key)
            self.model[key] = row

    def _sync_live(self) -> None:
        """Rebuild the live keys when a test assigned :attr:`model` itself."""
        if self._live_of != id(self.model) or len(self._live) != len(self.model):
            self._live_of = id(self.model)
            self._live = sorted(self.model)
            self._slot = {key: slot for slot, key in enumerate(self._live)}

    def _row(self, key: int) -> tuple[dict[str, Any], Row]:
        moment = START + timedelta(days=self.rng.randrange(6), seconds=self.rng.randrange(86_400),
                                   microseconds=self.rng.randrange(1_000_000))
        name = f"n{key}-{self.rng.randrange(10**6)}"
        text = moment.astimezone(self.rng.choice(OFFSETS)).isoformat()
        return {"id": key, "name": name, "updated_at": text}, (name, micros(moment))

    def _message_key(self, key: int) -> bytes:
        return json.dumps({"id": key}).encode()

    def _partition(self, key: bytes | None) -> int | None:
        if self.partitions is None:
            return None
        return kafka_partition(key, self.partitions) if key is not None else self.rng.randrange(self.partitions)

    def _emit(self, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> tuple[bytes | None, bytes | None]:
        """(value, message key) of one change."""
        key = self._message_key((after or before or {})["id"])
        if self.fmt == "debezium":
            envelope = {"before": before, "after": after, "op": op, "ts_ms": 1, "source": {"db": "shop"}}
            if self.rng.random() < 0.2:
                envelope = {"schema": {"type": "struct", "fields": []}, "payload": envelope}
            # Debezium's message key is the row's key (of before for a delete; a key change is keyed
            # by the old key, and only emitted so when both keys share a partition).
            if op in ("d", "u") and before is not None:
                key = self._message_key(before["id"])
            return json.dumps(envelope).encode(), key if self.partitions is not None else None
        if op == "d":
            if self.rng.random() < 0.5:
                return None, key  # a Kafka tombstone: deletes the message key's row
            return json.dumps({**(before or {}), "__deleted": self.rng.choice([True, "true"])}).encode(), key
        return json.dumps({**(after or {}), "__deleted": "false"} if self.rng.random() < 0.3 else after).encode(), key

    def _add(self, value: bytes | None, key: bytes | None, effects: tuple[Effect, ...], broken: bool = False,
             partition_key: bytes | None = None) -> None:
        self.emitted.append(Emitted(value, key, self._partition(partition_key if partition_key is not None else key),
                                    broken, effects))
        for k, row in effects:
            self._set(k, row)

    def _new_key(self) -> int:
        """A key that is not live: the next unused one while the key space allows, else a deleted one."""
        if self.max_keys is None or self.next_key < self.max_keys:
            self.next_key += 1
            return self.next_key - 1
        while True:  # the space is at most 9/10 full (see _step)
            key = self.rng.randrange(self.max_keys)
            if key not in self.model:
                return key

    def records(self, count: int) -> tuple[list[bytes | None], list[bytes | None]]:
        """``count`` more changes (a key change between Kafka partitions is three records); returns the
        new records' values and message keys."""
        first = len(self.emitted)
        for _ in range(count):
            self._step()
        new = self.emitted[first:]
        return [e.value for e in new], [e.key for e in new]

    def _step(self) -> None:
        roll = self.rng.random()
        self._sync_live()
        live = self._live
        if roll < 0.03:
            self.dead += 1
            self._add(b"{broken", None, (), broken=True)
            return
        if roll < 0.06 and self.fmt == "debezium":
            self._add(None, None, ())  # the tombstone after a delete: skipped
            return
        # A bounded key space grows a larger table: fewer deletes, and no new key once it is nearly full.
        full = self.max_keys is not None and len(live) >= self.max_keys * 9 // 10
        deletes = 0.45 if self.max_keys is None else 0.35
        if roll < 0.25 or len(live) < 5:
            if full or (self.model and self.rng.random() >= 0.7):
                key = self.rng.randrange(self.next_key)  # a re-insert / upsert of an old key
            else:
                key = self._new_key()
            self.next_key = max(self.next_key, key + 1)
            after, row = self._row(key)
            value, message_key = self._emit("c", None, after)
            self._add(value, message_key, ((key, row),), partition_key=self._message_key(key))
        elif roll < deletes:
            key = self.rng.choice(live)
            before = {"id": key, "name": self.model[key][0]}
            value, message_key = self._emit("d", before, None)
            self._add(value, message_key, ((key, None),), partition_key=self._message_key(key))
            if self.partitions is not None and self.fmt == "debezium" and self.rng.random() < 0.5:
                self._add(None, self._message_key(key), ())  # Debezium's tombstone after the delete
        elif roll < 0.52 and self.fmt == "debezium" and not full:
            old = self.rng.choice(live)
            new = self._new_key()
            after, row = self._row(new)
            before = {"id": old, "name": self.model[old][0]}
            old_key, new_key = self._message_key(old), self._message_key(new)
            if self.partitions is None or self._partition(old_key) == self._partition(new_key):
                value, message_key = self._emit("u", before, after)  # a key change in one event
                self._add(value, message_key, ((old, None), (new, row)), partition_key=old_key)
            else:  # as Debezium sends a key change: delete + tombstone (old key), create (new key)
                value, message_key = self._emit("d", before, None)
                self._add(value, message_key, ((old, None),), partition_key=old_key)
                self._add(None, old_key, ())
                value, message_key = self._emit("c", None, after)
                self._add(value, message_key, ((new, row),), partition_key=new_key)
        else:
            key = self.rng.choice(live)
            after, row = self._row(key)  # a new day most of the time: the row moves partition
            value, message_key = self._emit("u", {"id": key, "name": self.model[key][0]}, after)
            self._add(value, message_key, ((key, row),), partition_key=self._message_key(key))


def model_of(records: Iterable[Emitted]) -> dict[int, Row]:
    """The model after applying ``records`` in order."""
    model: dict[int, Row] = {}
    for record in records:
        for key, row in record.effects:
            if row is None:
                model.pop(key, None)
            else:
                model[key] = row
    return model


def prefix_model(stream: ChangeStream, covered: Callable[[int, Emitted], bool]) -> dict[int, Row]:
    """The model of the records ``covered(index, record)`` selects, applied in stream order (for Kafka:
    the changes of a key all live in one partition, so a per-partition prefix is a consistent state)."""
    return model_of(record for index, record in enumerate(stream.emitted) if covered(index, record))


def pyiceberg_rows(table: Table) -> dict[int, Row]:
    """The table as pyiceberg's reader reads it (position deletes and deletion vectors applied)."""
    rows = table.scan(selected_fields=("id", "name", "updated_at")).to_arrow()
    ids = rows.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a key is in the table twice"
    micros = rows.column("updated_at").cast("int64").to_pylist()
    return dict(zip(ids, zip(rows.column("name").to_pylist(), micros, strict=True), strict=True))


def spark_rows(spark: SparkSession, table: Table) -> dict[int, Row]:
    """The table as Apache Iceberg's Spark runtime reads it (every kind of delete applied)."""
    frame = spark.read.format("iceberg").load(table.metadata_location)
    rows = frame.selectExpr("id", "name", "unix_micros(updated_at) AS micros").collect()
    assert len(rows) == len({row["id"] for row in rows}), "a key is in the table twice"
    return {row["id"]: (row["name"], row["micros"]) for row in rows}


def write_change_files(inbox: Path, stream: ChangeStream, files: int, per_file: int) -> None:
    """The stream's next changes as JSON change files (an upsert-format delete by message key as ``__deleted``)."""
    inbox.mkdir(exist_ok=True)
    for number in range(files):
        values, keys = stream.records(per_file)
        lines = []
        for value, key in zip(values, keys, strict=True):
            if value is None and key is not None:  # an upsert-format delete by message key has no file form
                value = json.dumps({**json.loads(key), "__deleted": True}).encode()
            lines.append((value or b"null").decode())
        (inbox / f"{number:04d}.json").write_text("\n".join(lines) + "\n")


def sync_change_files(directory: Path, spark: SparkSession, stream: ChangeStream, *, deletes: str,
                      format_version: str, partitioned: bool = True, copy_on_write_below: str = "0") -> Table:
    """The stream's next 3,000 changes (five Debezium change files of 600) synced by the job, one file a
    trigger, into ``sales.orders`` under ``directory``: keyed by id, partitioned by ``day(updated_at)``
    unless ``partitioned`` is false, the older rows deleted as ``deletes`` says (``position`` or
    ``equality``), upkeep's rewrites off so that the head holds the deletes as the triggers wrote them, and small
    files written again by the commit below ``copy_on_write_below`` only (changes.copyOnWriteBelow; 0: never).
    Returns the table once the last file is committed."""
    write_change_files(directory / "inbox", stream, 5, 600)
    table: dict[str, Any] = {"key": KEY, "properties": {"format-version": format_version}}
    if partitioned:
        table["partitionBy"] = ["day(updated_at)"]
    sync = make_sync(directory, {"files": {"path": str(directory / "inbox"), "maxFilesPerTrigger": 1}}, schema=SCHEMA,
                     table=table, changes={"format": "debezium", "deletes": deletes,
                                                          "copyOnWriteBelow": copy_on_write_below},
                     deadLetter={"table": "sales.orders_dlq"},
                     maintenance={"compaction": {"enabled": False}, "rewriteDeletes": {"enabled": False}})
    catalog = catalog_of(sync)

    def reached() -> bool:
        commits = sink_commits(catalog.load_table("sales.orders"), "test/orders")
        return bool(commits) and commits[-1].frontier == {"after": "0004.json"}

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(reached, "the last file committed", timeout=300)
    return catalog.load_table("sales.orders")


def delete_contents(table: Table) -> Counter[str]:
    """The kinds of delete files live in the table's head: equality, position, deletion-vector."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    kinds: Counter[str] = Counter()
    for live in live_files(table, snapshot):
        if live.data_file.content == DataFileContent.EQUALITY_DELETES:
            kinds["equality"] += 1
        elif live.data_file.content == DataFileContent.POSITION_DELETES:
            kinds["deletion-vector" if is_deletion_vector(live.data_file) else "position"] += 1
    return kinds


def sql_string(text: str) -> str:
    """``text`` as a ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def chdb_scan(table: Table) -> pa.Table:
    """Every row chdb (ClickHouse in process) returns for the table, duplicates included, as columns id,
    name and micros (updated_at in µs). It reads through the ``icebergLocal`` table function pinned to
    the table's current metadata file (``iceberg_metadata_file_path``, relative to the table's
    location), not to whichever metadata file of the directory looks newest. Raises ``chdb.ChdbError``
    for a table it cannot read.

    chdb reads local files only below its working directory (its user files path is ``.``, whatever
    ``user_files_path`` says; elsewhere: ``PATH_ACCESS_DENIED``), so the query runs from the table's
    location; the job's threads have stopped by the time a test reads."""
    import chdb  # imported here: only the tests that read with chdb load its engine (a 530 MB library)

    location = normalize(table.metadata.location).rstrip("/")
    metadata = normalize(table.metadata_location)
    assert metadata.startswith(location + "/"), (metadata, location)
    query = (f"SELECT id, name, toUnixTimestamp64Micro(updated_at) AS micros FROM icebergLocal({sql_string(location)}, "
             f"SETTINGS iceberg_metadata_file_path = {sql_string(metadata[len(location) + 1:])})")
    with contextlib.chdir(location):
        return chdb.query(query, "ArrowTable")


def chdb_rows(table: Table) -> dict[int, Row]:
    """The table as chdb reads it (see :func:`chdb_scan`), in the shape of :func:`spark_rows`."""
    rows = chdb_scan(table)
    ids = rows.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a key is in the table twice"
    return dict(zip(ids, zip(rows.column("name").to_pylist(), rows.column("micros").to_pylist(), strict=True),
                    strict=True))
