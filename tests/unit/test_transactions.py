"""Aligning a trigger's range with the source's transactions (spark_app/sources/transactions.py): the fixpoint, the
verdicts, the transaction topic's events, and what the tasks note."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icebergsync.protocol import Writer
from icebergsync.spec import Column
from spark_app.decoding.changes import decode_changes
from spark_app.job.loop import SyncJob, _Loop
from spark_app.sources.kafka import KafkaPending, KafkaSource
from spark_app.sources.kafka_client import ClientSettings
from spark_app.sources.transaction_scan import TransactionScan
from spark_app.sources.transactions import (
    UNKNOWN_GRACE_SECONDS,
    End,
    TransactionAligner,
    align,
    decide,
    parse_event,
    totals,
)
from spark_app.sources.units import UnitStats

A, B = ("orders", 0), ("lines", 0)


def never(_: set[str]) -> bool:
    return False


def test_a_complete_range_is_kept() -> None:
    seen = {A: {"t1": [0, 0, 1], "t2": [1, 1, 1]}, B: {"t1": [0, 1, 2], "t2": [2, 3, 2]}}
    assert align({A: 2, B: 4}, seen, set()) == ({A: 2, B: 4}, set())
    verdict = decide({A: 0, B: 0}, {A: 2, B: 4}, {A: 2, B: 4}, seen, {"t1": 3, "t2": 3}, 100, never)
    assert verdict.action == "commit" and verdict.split == ()


def test_an_incomplete_transaction_cuts_every_partition_it_touches() -> None:
    # t2 has 4 events, 3 in the range: both partitions end at its first event there.
    seen = {A: {"t1": [0, 0, 1], "t2": [1, 1, 1]}, B: {"t1": [0, 1, 2], "t2": [2, 3, 2]}}
    end, excluded = align({A: 2, B: 4}, seen, {"t2"})
    assert (end, excluded) == ({A: 1, B: 2}, {"t2"})
    verdict = decide({A: 0, B: 0}, {A: 2, B: 4}, {A: 2, B: 4}, seen, {"t1": 3, "t2": 4}, 100, never)
    assert verdict.action == "restage" and verdict.end == {A: 1, B: 2}


def test_the_fixpoint_follows_the_cuts_across_partitions() -> None:
    # t3 is incomplete; cutting A at t3 cuts t2 there (its event after t3's first); t2 then cuts B, which cuts t4.
    seen = {A: {"t1": [0, 0, 1], "t3": [1, 1, 1], "t2": [2, 2, 1]},
            B: {"t1": [0, 0, 1], "t2": [1, 1, 1], "t4": [2, 2, 1]},
            ("c", 0): {"t4": [5, 5, 1], "t5": [3, 3, 1]}}
    end, excluded = align({A: 3, B: 3, ("c", 0): 6}, seen, {"t3"})
    assert excluded == {"t3", "t2", "t4"}
    assert end == {A: 1, B: 1, ("c", 0): 5}


def test_an_interleaved_transaction_is_cut_by_its_last_event() -> None:
    # t1's events at 0 and 3 with t2 (incomplete) at 1: cutting A at 1 leaves t1 split, so t1 goes too.
    seen = {A: {"t1": [0, 3, 2], "t2": [1, 1, 1]}}
    assert align({A: 4}, seen, {"t2"}) == ({A: 0}, {"t1", "t2"})


def test_nothing_whole_waits_then_commits_split_after_max_wait() -> None:
    seen = {A: {"t1": [0, 0, 1]}}
    waiting = decide({A: 0}, {A: 1}, {A: 1}, seen, {"t1": None}, 100, never)
    assert waiting.action == "wait" and waiting.waiting == {"t1"}
    late = decide({A: 0}, {A: 1}, {A: 1}, seen, {"t1": None}, 100, lambda ids: True)
    assert late.action == "commit" and late.split == ("t1",)


def test_a_transaction_larger_than_a_trigger_is_committed_split() -> None:
    seen = {A: {"big": [0, 9, 10]}}
    verdict = decide({A: 0}, {A: 10}, {A: 50}, seen, {"big": 40}, 10, never)
    assert verdict.action == "commit" and verdict.split == ("big",)


def test_a_transaction_that_fits_but_not_the_planned_range_grows_it() -> None:
    # The source gave A only 2 offsets of its backlog, the first transaction has 3 events there.
    seen = {A: {"t1": [0, 1, 2]}, B: {"t1": [0, 0, 1]}}
    verdict = decide({A: 0, B: 0}, {A: 2, B: 1}, {A: 100, B: 1}, seen, {"t1": 4}, 10, never)
    assert verdict.action == "restage" and verdict.end == {A: 8, B: 1}


def test_unknown_transactions_are_not_aligned() -> None:
    verdict = decide({A: 0}, {A: 1}, {A: 1}, {A: {"t?": [0, 0, 1]}}, {}, 10, never)
    assert verdict.action == "commit" and verdict.unknown == ("t?",)


class _EmptyLog:
    """A transaction topic that shows nothing (yet)."""

    def __init__(self) -> None:
        self.ends: dict[str, End] = {}
        self.begun: dict[str, None] = {}

    def refresh(self, wanted: object) -> None:
        pass


def test_a_transaction_the_topic_does_not_show_yet_is_waited_for_a_moment_then_committed_unaligned() -> None:
    """Debezium writes BEGIN and END beside the events: a transaction's events may be read before them."""
    now = [0.0]
    aligner = TransactionAligner("db.transaction", 300, ClientSettings("unused:9092"), lambda: ["db.t"], 10,
                                 clock=lambda: now[0], transaction_log=_EmptyLog())  # type: ignore[arg-type]
    seen = {A: {"t?": [0, 0, 1]}}
    assert aligner.check({A: 0}, {A: 1}, {A: 1}, seen).action == "wait"
    now[0] = UNKNOWN_GRACE_SECONDS - 1
    assert aligner.check({A: 0}, {A: 1}, {A: 1}, seen).action == "wait"
    now[0] = UNKNOWN_GRACE_SECONDS
    verdict = aligner.check({A: 0}, {A: 1}, {A: 1}, seen)
    assert verdict.action == "commit" and verdict.unknown == ("t?",)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_aligned_end_holds_only_whole_transactions(data: st.DataObject) -> None:
    """Random interleavings of transactions over partitions: the aligned range holds every event of each kept
    transaction, and is the longest such prefix no longer than the staged one."""
    partitions = data.draw(st.integers(1, 3))
    logs: list[list[str]] = [data.draw(st.lists(st.sampled_from(["t1", "t2", "t3", "t4", "t5"]), max_size=8))
                             for _ in range(partitions)]
    staged = [data.draw(st.integers(0, len(events))) for events in logs]
    seen: dict[tuple[str, int], dict[str, list[int]]] = {}
    for p, events in enumerate(logs):
        for offset, t in enumerate(events[:staged[p]]):
            entry = seen.setdefault(("x", p), {}).setdefault(t, [offset, offset, 0])
            entry[1], entry[2] = offset, entry[2] + 1
    whole = {t: sum(events.count(t) for events in logs) for t in {t for events in logs for t in events}}
    incomplete = {t for t, n in totals(seen).items() if n < whole[t]}
    end, excluded = align({("x", p): staged[p] for p in range(partitions)}, seen, incomplete)
    kept = [events[:end[("x", p)]] for p, events in enumerate(logs)]
    for t in {t for events in kept for t in events}:
        assert sum(events.count(t) for events in kept) == whole[t], (logs, staged, end)
        assert t not in excluded
    for p in range(partitions):  # maximal: the next event in each cut partition is of a left-out transaction
        if end[("x", p)] < staged[p]:
            assert logs[p][end[("x", p)]] in excluded


def test_transaction_topic_events() -> None:
    begin = {"status": "BEGIN", "id": "571:53195829", "ts_ms": 1, "event_count": None, "data_collections": None}
    end = {"status": "END", "id": "571:53195829", "ts_ms": 2, "event_count": 3,
           "data_collections": [{"data_collection": "public.orders", "event_count": 1},
                                {"data_collection": "public.order_lines", "event_count": 2}]}
    assert parse_event(json.dumps(begin).encode()) == ("BEGIN", "571", None)
    status, transaction, ended = parse_event(json.dumps({"schema": {}, "payload": end}).encode()) or ("", "", None)
    assert (status, transaction) == ("END", "571") and ended is not None
    assert ended.expected("db", {"db.public.orders", "db.public.order_lines"}) == 3
    assert ended.expected("db", {"db.public.order_lines"}) == 2  # the sync reads one of the two tables
    assert ended.expected("db", {"other"}) == 3  # no data collection maps to a topic: the total
    assert End(5).expected(None, set()) == 5
    assert parse_event(b"not json") is None and parse_event(None) is None
    # PostgreSQL: <txId>:<LSN>, the LSN that of each event (BEGIN, END and every change event differ): by txId.
    postgres = {**end, "id": "727:22185376"}
    assert parse_event(json.dumps(postgres).encode()) == ("END", "727", ended)
    assert parse_event(json.dumps({**begin, "id": "727:22184848"}).encode()) == ("BEGIN", "727", None)
    assert parse_event(json.dumps({**begin, "id": "mysql-bin.000003:1234"}).encode())[1] == "mysql-bin.000003:1234"  # type: ignore[index]


def test_the_tasks_note_each_events_transaction() -> None:
    events = [json.dumps({"op": "c", "after": {"id": i}, "transaction": {"id": f"tx{i // 2}", "total_order": 1,
                                                                        "data_collection_order": 1}}).encode()
              for i in range(4)]
    events.append(json.dumps({"op": "r", "after": {"id": 9}, "transaction": None}).encode())
    events.append(json.dumps({"op": "c", "after": {"id": 10}, "transaction": {"id": "727:22185080"}}).encode())
    noted: list[tuple[int, str]] = []
    decode_changes(events, None, lambda i: {"offset": i}, [Column(name="id", type="long", required=True)], ["id"],
                   "debezium", 0, transactions=noted)
    assert noted == [(0, "tx0"), (1, "tx0"), (2, "tx1"), (3, "tx1"), (5, "727")]
    stats, other = UnitStats(), UnitStats()
    stats.saw_transaction("t", 0, "tx0", 10, 10)
    stats.saw_transaction("t", 0, "tx0", 12, 12)
    other.saw_transaction("t", 0, "tx0", 7, 8, 2)
    stats.merge(other)
    assert stats.transactions == {("t", 0): {"tx0": [7, 12, 4]}}


def test_the_transaction_log_reads_back_only_as_far_as_needed_then_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    import spark_app.sources.transactions as transactions

    log_records: list[bytes] = []
    for number in range(6000):  # BEGIN and END of transaction n at offsets 2n and 2n + 1
        log_records.append(json.dumps({"status": "BEGIN", "id": f"t{number}"}).encode())
        log_records.append(json.dumps({"status": "END", "id": f"t{number}", "event_count": 2,
                                       "data_collections": []}).encode())
    reads: list[tuple[int, int]] = []

    class Lookup:
        def partitions(self, topics: list[str]) -> list[tuple[str, int]]:
            return [("db.transaction", 0)]

        def offsets(self, partitions: list[tuple[str, int]]) -> tuple[dict[tuple[str, int], int], ...]:
            return {("db.transaction", 0): 0}, {("db.transaction", 0): len(log_records)}

        def close(self) -> None:
            pass

    def read_range(_client: object, _topic: str, _partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
        reads.append((start, end))
        yield pa.RecordBatch.from_pydict({"value": pa.array(log_records[start:end], pa.binary())})

    monkeypatch.setattr(transactions, "read_range", read_range)
    log = transactions.TransactionLog(ClientSettings("k:9092"), "db.transaction", Lookup())  # type: ignore[arg-type]
    log.refresh(["t5990"])  # near the end: one chunk back
    assert reads == [(12000 - transactions.FIRST_READ_CHUNK, 12000)] and log.ends["t5990"].events == 2
    log.refresh(["t10"])  # far back: further chunks, doubling, down to the first offset
    assert reads[-1][0] == 0 and "t10" in log.ends
    log_records.append(json.dumps({"status": "BEGIN", "id": "t-new"}).encode())
    reads.clear()
    log.refresh(["t-new"])  # what is new, forward
    assert reads == [(12000, 12001)] and log.known("t-new") and "t-new" not in log.ends
    log.refresh(["t-missing"])
    assert not log.known("t-missing")  # unknown: the whole topic has been read


def change_event(transaction: str | None, row: int, wrapped: bool = False, column: str = "body") -> bytes:
    """A Debezium change event of ``transaction`` (None: a null ``transaction`` block) in Debezium's field order,
    optionally in Connect's ``{schema, payload}`` form; its rows have a column ``column``."""
    payload = {"before": {"id": row, column: {"id": "not-a-transaction"}}, "after": {"id": row, column: "x"},
               "source": {"txId": 1}, "transaction": {"id": transaction, "total_order": 1, "data_collection_order": 1}
               if transaction else None, "op": "u", "ts_ms": 1}
    schema = {"type": "struct", "fields": [{"field": "transaction", "type": "struct", "optional": True}]}
    return json.dumps({"schema": schema, "payload": payload} if wrapped else payload,
                      separators=(",", ":")).encode()


class Partitions:
    """Kafka partitions for :class:`TransactionScan`: their records by offset, and every range read."""

    def __init__(self, records: dict[tuple[str, int], list[bytes | None]]) -> None:
        self.records = records
        self.reads: list[tuple[tuple[str, int], int, int]] = []

    def read(self, _client: object, topic: str, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
        self.reads.append(((topic, partition), start, end))
        values = self.records[(topic, partition)][start:end]
        yield pa.RecordBatch.from_pydict({"offset": pa.array(range(start, start + len(values)), pa.int64()),
                                          "key": pa.array([None] * len(values), pa.binary()),
                                          "value": pa.array(values, pa.binary())})


def test_the_driver_reads_the_transactions_the_tasks_note() -> None:
    """Before staging, the driver finds per partition what the tasks note while decoding the same records: Connect's
    schema, columns named ``transaction`` and JSON's spacing aside."""
    records: list[bytes | None] = [change_event("tx1", 0), change_event("tx1", 1, wrapped=True), None,
                                   change_event(None, 2, column="transaction"), b"not json",
                                   change_event("727:22185080", 3, column="transaction"),
                                   json.dumps({"op": "c", "after": {"id": 4}, "transaction": {"id": "tx2"}}).encode(),
                                   change_event("727:22185112", 5, wrapped=True), change_event("tx1", 6)]
    partitions = Partitions({A: records})
    scan = TransactionScan(ClientSettings("unused:9092"), partitions.read)
    noted: list[tuple[int, str]] = []
    decode_changes(records[1:8], None, lambda i: {"offset": i}, [Column(name="id", type="long", required=True)],
                   ["id"], "debezium", 0, transactions=noted)
    stats = UnitStats()
    for index, transaction in noted:
        stats.saw_transaction(*A, transaction, 1 + index, 1 + index)
    assert scan.seen({A: 1}, {A: 8}) == stats.transactions
    assert stats.transactions == {A: {"tx1": [1, 1, 1], "727": [5, 7, 2], "tx2": [6, 6, 1]}}
    assert scan.seen({A: 3}, {A: 5}) == {} and scan.seen({B: 0}, {B: 0}) == {}


def test_the_driver_reads_each_offset_once_while_ranges_move_forward() -> None:
    partitions = Partitions({A: [change_event(f"tx{offset // 3}", offset) for offset in range(30)]})
    scan = TransactionScan(ClientSettings("unused:9092"), partitions.read)
    assert scan.seen({A: 0}, {A: 10}) == {A: {"tx0": [0, 2, 3], "tx1": [3, 5, 3], "tx2": [6, 8, 3], "tx3": [9, 9, 1]}}
    assert scan.seen({A: 0}, {A: 9})[A]["tx2"] == [6, 8, 3]  # narrowed: nothing read
    assert scan.seen({A: 9}, {A: 15})[A] == {"tx3": [9, 11, 3], "tx4": [12, 14, 3]}  # the next trigger: the rest only
    assert partitions.reads == [(A, 0, 10), (A, 10, 15)]
    assert scan.seen({A: 2}, {A: 4})[A] == {"tx0": [2, 2, 1], "tx1": [3, 3, 1]}  # behind what is kept: read again
    assert partitions.reads[-1] == (A, 2, 4)


class _KnownLog(_EmptyLog):
    """A transaction topic that shows the given ENDs (event counts) and BEGINs."""

    def __init__(self, ends: dict[str, int], begun: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.ends = {transaction: End(events) for transaction, events in ends.items()}
        self.begun = dict.fromkeys(begun)


def planned(start: int, end: int, log_end: int) -> KafkaPending:
    return KafkaPending(end={A[0]: {str(A[1]): end}}, estimated_bytes=end - start, starts={A: start},
                        log_ends={A: log_end})


def job_aligning(events: list[str], log: _KnownLog) -> tuple[SyncJob, Partitions]:
    """A job (only what planning a range needs) whose partition ``A`` holds events of the transactions ``events``."""
    partitions = Partitions({A: [change_event(transaction, offset) for offset, transaction in enumerate(events)]})
    job = SyncJob.__new__(SyncJob)
    job.writer = Writer("sink", 1, "attempt")
    job.aligner = TransactionAligner("db.transaction", 300, ClientSettings("unused:9092"), lambda: ["orders"], 100,
                                     transaction_log=log,  # type: ignore[arg-type]
                                     scan=TransactionScan(ClientSettings("unused:9092"), partitions.read))
    return job, partitions


def test_a_range_is_aligned_before_it_is_staged() -> None:
    """A range holding part of a transaction is narrowed before it; one holding only part of the first transaction
    grows to hold it, unless staged ahead of a commit; while a transaction is open, its range is staged once (a
    truncate or a schema change its tasks find comes first), then waited for without staging."""
    source = KafkaSource.__new__(KafkaSource)  # within() needs no broker
    job, _ = job_aligning(["t1", "t1", "t2", "t2", "t2", "t3"], _KnownLog({"t1": 2, "t2": 3}, begun=("t3",)))
    loop = _Loop.__new__(_Loop)
    loop.frontier, loop.staged_waiting = {"orders": {"0": 5}}, None
    for ahead in (None, loop):
        narrowed = job._aligned(source, planned(0, 4, 6), ahead)
        assert narrowed is not None and narrowed.end == {"orders": {"0": 2}}
    grown = job._aligned(source, planned(2, 4, 6), loop)
    assert grown is not None and grown.end == {"orders": {"0": 5}}
    assert job._aligned(source, planned(2, 4, 6), None) is None
    assert job._aligned(source, planned(5, 6, 6), None) is None
    once = job._aligned(source, planned(5, 6, 6), loop)
    assert once is not None and once.end == {"orders": {"0": 6}}
    assert job._aligned(source, planned(5, 6, 6), loop) is None
    loop.frontier = {"orders": {"0": 6}}  # a commit moved the frontier: the next wait stages once again
    assert job._aligned(source, planned(5, 6, 6), loop) is not None
