"""Source truncates: positions of Debezium events, decoding around a truncate, the first event after one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from icebergsync.spec import Column
from spark_app.decoding.changes import Truncates, decode_changes
from spark_app.decoding.source_positions import decode, encode, source_position
from spark_app.sources.truncate_replay import first_after

COLUMNS = [Column(name="id", type="long", required=True), Column(name="v", type="string")]


def event(op: str, key: int | None, source: dict[str, Any]) -> str:
    return json.dumps({"op": op, "before": None, "after": None if key is None else {"id": key, "v": "x"},
                       "source": source})


def test_positions_of_postgres_and_binlog_events_and_none_elsewhere() -> None:
    assert source_position({"source": {"connector": "postgresql", "lsn": 22402896, "txId": 728}}) == (22402896,)
    assert source_position({"source": {"file": "mysql-bin.000012", "pos": 4455, "row": 2}}) == (12, 4455, 2)
    assert source_position({"source": {"file": "mariadb-bin.000003", "pos": 10}}) == (3, 10, 0)
    assert (12, 4455, 2) > (11, 9_999_999, 0)  # a later binlog file is later whatever the offset in it
    assert source_position({"source": {"connector": "sqlserver", "change_lsn": "00000027:00000758:0003"}}) is None
    assert source_position({"op": "t"}) is None
    assert decode(encode((12, 4455, 2))) == (12, 4455, 2) and decode("nonsense") is None and decode(None) is None


def test_decoding_skips_what_a_truncate_applied_removed_and_notes_newer_truncates() -> None:
    pg = {"connector": "postgresql"}
    records = [event("c", 1, {**pg, "lsn": 100}), event("t", None, {**pg, "lsn": 150}), event("c", 2, {**pg, "lsn": 200}),
               event("t", None, {**pg, "lsn": 300}), event("t", None, {"connector": "sqlserver"})]

    def decoded(applied: tuple[int, ...] | None) -> tuple[list[Any], Truncates]:
        truncates = Truncates(applied)
        table = decode_changes(records, None, lambda i: {"i": i}, COLUMNS, ["id"], "debezium", 0, truncates=truncates)
        return table.select(["id", "_isync_error"]).to_pylist(), truncates

    rows, truncates = decoded(None)
    assert [row["id"] for row in rows if row["_isync_error"] is None] == [1, 2] and truncates.seen == (300,)
    assert "a truncate (op t) whose source names no position" in rows[-1]["_isync_error"]
    rows, truncates = decoded((150,))  # the one at 150 applied: the change before it is skipped
    assert [row["id"] for row in rows if row["_isync_error"] is None] == [2] and truncates.seen == (300,)
    rows, truncates = decoded((300,))
    assert [row["id"] for row in rows if row["_isync_error"] is None] == [] and truncates.seen is None
    # Without a collector (a caller that cannot empty a table) a truncate is never silently dropped.
    table = decode_changes(records[1:2], None, lambda i: {"i": i}, COLUMNS, ["id"], "debezium", 0)
    assert table.column("_isync_error").to_pylist() == [
        "a truncate (op t) where nothing empties the table (a decoder without truncates)"]


def reader(values: list[bytes | None], reads: list[tuple[int, int]]) -> Any:
    def read(start: int, end: int) -> Iterator[pa.RecordBatch]:
        reads.append((start, end))
        offsets = list(range(start, min(end, len(values))))
        yield pa.RecordBatch.from_pydict({"offset": offsets, "value": [values[o] for o in offsets]})
    return read


def test_the_first_event_after_a_truncate_is_found_by_bisection_over_tombstones() -> None:
    values: list[bytes | None] = []
    for lsn in range(0, 2000, 10):
        values.append(json.dumps({"schema": {}, "payload": {"op": "c", "source": {"lsn": lsn}}}).encode())
        values.append(None)  # a tombstone: no position
    reads: list[tuple[int, int]] = []
    assert first_after(reader(values, reads), 0, len(values), (995,)) == 200  # lsn 1000 is record 100, offset 200
    assert len(reads) < 20  # a bisection, not a scan
    assert first_after(reader(values, []), 0, len(values), (5000,)) == len(values)  # nothing after it
    assert first_after(reader(values, []), 0, len(values), (-1,)) == 0
    assert first_after(reader(values, []), 37, 41, (0,)) == 38  # from an odd start, over a tombstone
