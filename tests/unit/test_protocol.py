"""icebergsync.protocol on hand-built table metadata: encoding, parsing, the fence decision, resume scanning."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from icebergsync import protocol
from icebergsync.errors import ProgressConflictError
from icebergsync.protocol import Writer

SINK = "ns/orders"
ME = Writer(SINK, 3, "attempt-a")
GENERATOR = {"kind": "generator"}


def sink_summary(writer: Writer, frontier: dict[str, Any] | None, kind: str = protocol.KIND_DATA,
                 **extra: Any) -> dict[str, str]:
    return protocol.CommitStatement(writer, kind, frontier, **extra).properties()


class History:
    """Builds table metadata: a chain of snapshots (oldest first), then expiry, rollback, properties."""

    def __init__(self, format_version: int = 2):
        self.format_version = format_version
        self.snapshots: list[dict[str, Any]] = []
        self.head: int | None = None
        self.properties: dict[str, str] = {}

    def commit(self, summary: dict[str, str] | None = None, *, checkpoint: bool = True) -> int:
        """Append a snapshot on the head; a sink summary also sets that sink's checkpoint property."""
        snapshot_id = 1000 + len(self.snapshots)
        sequence = len(self.snapshots) + 1 if self.format_version == 2 else 0
        self.snapshots.append({
            "snapshot-id": snapshot_id, "parent-snapshot-id": self.head, "sequence-number": sequence,
            "timestamp-ms": 1_700_000_000_000 + len(self.snapshots) * 1000, "manifest-list": f"m-{snapshot_id}.avro",
            "summary": {"operation": "append", **(summary or {})},
        })
        self.head = snapshot_id
        if summary and checkpoint and protocol.SINK_ID in summary:
            commit = protocol.parse_commit(self.snapshot(snapshot_id))
            assert commit is not None
            self.properties[protocol.checkpoint_key(commit.writer.sink_id)] = protocol.checkpoint_value(
                commit.writer, commit.frontier, snapshot_id, source=commit.source, snapshot=self.snapshot(snapshot_id))
        return snapshot_id

    def sink(self, writer: Writer, next_id: int, kind: str = protocol.KIND_DATA, **extra: Any) -> int:
        return self.commit(sink_summary(writer, {"next_id": next_id}, kind, source=GENERATOR, **extra))

    def expire(self, *snapshot_ids: int) -> None:
        self.snapshots = [s for s in self.snapshots if s["snapshot-id"] not in snapshot_ids]

    def rollback(self, snapshot_id: int) -> None:
        self.head = snapshot_id

    def snapshot(self, snapshot_id: int) -> Any:
        return self.metadata().snapshot_by_id(snapshot_id)

    def metadata(self) -> TableMetadata:
        schema = Schema(NestedField(1, "id", LongType(), required=True))
        base = new_table_metadata(schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "file:///warehouse/t",
                                  {"format-version": str(self.format_version)})
        document = base.model_dump(by_alias=True, mode="json")
        document.update({
            "snapshots": self.snapshots,
            "current-snapshot-id": self.head,
            "refs": {"main": {"snapshot-id": self.head, "type": "branch"}} if self.head is not None else {},
            "properties": {**document["properties"], **self.properties},
            "last-sequence-number": len(self.snapshots) if self.format_version == 2 else 0,
        })
        return TableMetadataUtil.parse_obj(document)


# -- encoding ------------------------------------------------------------------------------------


def test_json_is_canonical() -> None:
    assert protocol.encode_json({"b": 1, "a": {"d": 2, "c": [1, 2]}}) == '{"a":{"c":[1,2],"d":2},"b":1}'


FULL_STATEMENT = protocol.CommitStatement(
    ME, protocol.KIND_DATA, {"next_id": 7}, source=GENERATOR, records=7, dead_letters=2,
    dead_letter_files=("s3://b/dl-1.parquet",), max_event_time="2026-01-01T00:00:00+00:00",
    source_lag={"records": 3}, source_notes={"late-files": ["b.json"]}, cut={"atomic": True, "id": "c-1", "tables": 2},
)


def test_the_properties_of_a_statement_are_the_wire_format() -> None:
    assert FULL_STATEMENT.properties() == {
        "icebergsync.protocol": "1",
        "icebergsync.sink-id": "ns/orders",
        "icebergsync.sink-version": "3",
        "icebergsync.attempt": "attempt-a",
        "icebergsync.kind": "data",
        "icebergsync.frontier": '{"next_id":7}',
        "icebergsync.records": "7",
        "icebergsync.dead-letters": "2",
        "icebergsync.source": '{"kind":"generator"}',
        "icebergsync.dead-letter-files": '["s3://b/dl-1.parquet"]',
        "icebergsync.max-event-time": "2026-01-01T00:00:00+00:00",
        "icebergsync.source-lag": '{"records":3}',
        "icebergsync.source-notes": '{"late-files":["b.json"]}',
        "icebergsync.cut": '{"atomic":true,"id":"c-1","tables":2}',
    }
    empty = protocol.CommitStatement(ME, protocol.KIND_FENCE, None, source={}, dead_letter_files=(), max_event_time="",
                                     source_lag={}, source_notes={}, cut={})
    assert empty.properties() == {
        "icebergsync.protocol": "1", "icebergsync.sink-id": "ns/orders", "icebergsync.sink-version": "3",
        "icebergsync.attempt": "attempt-a", "icebergsync.kind": "fence", "icebergsync.frontier": "null",
        "icebergsync.records": "0", "icebergsync.dead-letters": "0",
    }


JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.text()
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(), inner, max_size=3), max_leaves=8)
JSON_OBJECTS = st.dictionaries(st.text(), JSON_VALUES, max_size=4)
STATED_OBJECTS = st.none() | JSON_OBJECTS.filter(bool)  # an empty object is not stated: it reads back as None
STATEMENTS = st.builds(
    protocol.CommitStatement,
    writer=st.builds(Writer, st.text(), st.integers(), st.text()),
    kind=st.text(),
    frontier=st.none() | JSON_OBJECTS,
    source=STATED_OBJECTS,
    records=st.integers(),
    dead_letters=st.integers(),
    dead_letter_files=st.lists(st.text(), max_size=3).map(tuple),
    max_event_time=st.none() | st.text(min_size=1),
    source_lag=STATED_OBJECTS,
    source_notes=STATED_OBJECTS,
    cut=STATED_OBJECTS,
)


@given(STATEMENTS)
def test_a_statement_reads_back_from_its_properties(statement: protocol.CommitStatement) -> None:
    assert protocol.CommitStatement.from_properties(statement.properties()) == statement


def test_a_snapshot_carrying_a_statements_properties_parses_to_that_statement() -> None:
    history = History()
    snapshot_id = history.commit(FULL_STATEMENT.properties())
    commit = protocol.parse_commit(history.snapshot(snapshot_id))
    assert commit == protocol.SinkCommit(**vars(FULL_STATEMENT), snapshot_id=snapshot_id,
                                         timestamp_ms=history.snapshot(snapshot_id).timestamp_ms)


def test_checkpoint_round_trips_with_source_and_extra_fields() -> None:
    history = History()
    history.properties[protocol.checkpoint_key(SINK)] = protocol.checkpoint_value(
        ME, {"after": "b.json"}, 42, {"main-snapshot-id": 9}, source={"kind": "files", "path": "s3://in"})
    checkpoint = protocol.parse_checkpoint(history.metadata(), SINK)
    assert checkpoint == protocol.Checkpoint(ME, {"after": "b.json"}, 42, {"kind": "files", "path": "s3://in"},
                                             {"main-snapshot-id": 9})


# -- parsing foreign, old and damaged records ------------------------------------------------------


def test_snapshots_without_a_sink_id_are_foreign() -> None:
    history = History()
    foreign = history.commit({"spark.app.id": "compaction"})
    assert protocol.parse_commit(history.snapshot(foreign)) is None


def test_records_written_before_the_source_identity_still_parse() -> None:
    history = History()
    old = {protocol.SINK_ID: SINK, protocol.SINK_VERSION: "2", protocol.FRONTIER: '{"next_id":5}'}
    snapshot_id = history.commit(old, checkpoint=False)
    history.properties[protocol.checkpoint_key(SINK)] = f'{{"frontier":{{"next_id":5}},"snapshot-id":{snapshot_id},"version":2}}'
    commit = protocol.parse_commit(history.snapshot(snapshot_id))
    assert commit is not None and commit.source is None and commit.writer == Writer(SINK, 2, "")
    assert commit.kind == protocol.KIND_DATA and commit.frontier == {"next_id": 5}
    checkpoint = protocol.parse_checkpoint(history.metadata(), SINK)
    assert checkpoint is not None and checkpoint.source is None and checkpoint.writer.version == 2


@pytest.mark.parametrize("damage", [
    {protocol.SINK_VERSION: "three"},
    {protocol.FRONTIER: "{not json"},
    {protocol.FRONTIER: "[1, 2]"},
    {protocol.RECORDS: "many"},
    {protocol.DEAD_LETTER_FILES: '{"a": 1}'},
    {protocol.SOURCE: '"generator"'},
    {protocol.SOURCE_NOTES: "[]"},
    {protocol.CUT: "{not json"},
])
def test_a_damaged_sink_snapshot_is_an_error_not_foreign(damage: dict[str, str]) -> None:
    history = History()
    snapshot_id = history.commit({**sink_summary(ME, {"next_id": 1}), **damage}, checkpoint=False)
    with pytest.raises(protocol.DamagedRecordError, match=f"snapshot {snapshot_id} names sink"):
        protocol.parse_commit(history.snapshot(snapshot_id))


@pytest.mark.parametrize("raw", ["{broken", "[]", '{"frontier":{}}', '{"version":"x"}', '{"version":1,"frontier":[1]}'])
def test_a_damaged_checkpoint_is_an_error(raw: str) -> None:
    history = History()
    history.properties[protocol.checkpoint_key(SINK)] = raw
    with pytest.raises(protocol.DamagedRecordError, match="present but damaged"):
        protocol.parse_checkpoint(history.metadata(), SINK)
    assert protocol.parse_checkpoint(history.metadata(), "ns/other") is None


# -- resume scanning -------------------------------------------------------------------------------


def test_resume_from_the_newest_own_snapshot_skipping_foreign_and_other_sinks() -> None:
    history = History()
    history.sink(ME, 10)
    own = history.sink(ME, 20)
    history.commit({"operation-by": "compaction"})
    history.sink(Writer("ns/other", 9, "x"), 999)
    history.commit({**sink_summary(Writer("ns/third", 1, "y"), None), protocol.FRONTIER: "{damaged"}, checkpoint=False)
    progress = protocol.read_progress(history.metadata(), SINK)
    assert progress.resumed_from == "snapshot" and progress.frontier == {"next_id": 20}
    assert progress.last_commit is not None and progress.last_commit.snapshot_id == own
    assert progress.foreign_snapshots_on_top == 3 and progress.source == GENERATOR and progress.conflict is None


def test_another_sink_on_top_is_the_tables_current_writer() -> None:
    history = History()
    assert protocol.other_sink_on_top(history.metadata(), SINK) is None  # an empty table
    history.commit({"operation-by": "compaction"})
    history.sink(Writer("team-b/trips", 1, "x"), 5)
    history.commit({"operation-by": "compaction"})
    assert protocol.other_sink_on_top(history.metadata(), SINK) == "team-b/trips"  # never committed here
    history.sink(ME, 10)
    history.commit({"operation-by": "compaction"})
    assert protocol.other_sink_on_top(history.metadata(), SINK) is None  # older commits of others do not count
    history.sink(Writer("team-b/trips", 2, "y"), 6)
    assert protocol.other_sink_on_top(history.metadata(), SINK) == "team-b/trips"


def test_no_record_of_the_sink_starts_from_nothing() -> None:
    history = History()
    history.commit({"operation-by": "someone"})
    progress = protocol.read_progress(history.metadata(), SINK)
    assert (progress.resumed_from, progress.frontier, progress.highest, progress.conflict) == ("none", None, None, None)


def test_checkpoint_resumes_when_every_own_snapshot_expired() -> None:
    history = History()
    first, second = history.sink(ME, 5), history.sink(ME, 8)
    history.commit({"operation-by": "someone"})
    history.expire(first, second)
    progress = protocol.read_progress(history.metadata(), SINK)
    assert (progress.resumed_from, progress.frontier, progress.source) == ("checkpoint", {"next_id": 8}, GENERATOR)


@pytest.mark.parametrize("format_version", [1, 2])
def test_expiring_a_snapshot_below_the_head_is_not_a_rollback(format_version: int) -> None:
    """The history is cut between the head and the checkpoint's snapshot, which still exists."""
    history = History(format_version)
    history.sink(ME, 5)
    history.sink(ME, 8)
    compaction_delete = history.commit({"operation-by": "compaction"})
    history.commit({"operation-by": "compaction"})
    history.expire(compaction_delete)
    progress = protocol.read_progress(history.metadata(), SINK)
    assert progress.conflict is None
    assert (progress.resumed_from, progress.frontier) == ("checkpoint", {"next_id": 8})


def test_rollback_past_every_own_commit_is_a_conflict_not_a_replay() -> None:
    history = History()
    before = history.commit({"operation-by": "someone"})
    history.sink(ME, 5, protocol.KIND_FENCE)
    history.sink(ME, 8)
    history.rollback(before)
    progress = protocol.read_progress(history.metadata(), SINK)
    assert progress.resumed_from == "conflict" and progress.frontier is None
    assert progress.conflict is not None and "rolled back past every commit" in progress.conflict
    with pytest.raises(ProgressConflictError, match="rolled back"):
        protocol.check_resumable(progress, GENERATOR)


def test_rollback_past_every_own_commit_is_a_conflict_even_when_expiry_cut_the_history() -> None:
    history = History()
    root = history.commit({"operation-by": "someone"})
    base = history.commit({"operation-by": "someone"})
    history.sink(ME, 8)
    history.rollback(base)
    history.commit({"operation-by": "someone"})
    history.expire(root)
    progress = protocol.read_progress(history.metadata(), SINK)
    assert progress.resumed_from == "conflict"


def test_rollback_past_every_own_commit_then_their_expiry_is_still_a_conflict() -> None:
    history = History()
    before = history.commit({"operation-by": "someone"})
    first, second = history.sink(ME, 5), history.sink(ME, 8)
    history.rollback(before)
    history.commit({"operation-by": "someone"})
    history.expire(first, second)
    progress = protocol.read_progress(history.metadata(), SINK)
    assert progress.resumed_from == "conflict", "the checkpoint's frontier would skip rows main no longer holds"
    checkpoint = protocol.parse_checkpoint(history.metadata(), SINK)
    assert checkpoint is not None and (checkpoint.sequence_number, checkpoint.timestamp_ms) == (3, 1_700_000_002_000)


def test_a_checkpoint_without_its_snapshots_place_is_trusted_once_the_snapshot_expired() -> None:
    history = History()
    before = history.commit({"operation-by": "someone"})
    written = history.sink(ME, 5)
    history.properties[protocol.checkpoint_key(SINK)] = protocol.checkpoint_value(ME, {"next_id": 5}, written)
    history.rollback(before)
    history.expire(written)
    assert protocol.read_progress(history.metadata(), SINK).resumed_from == "checkpoint"


def test_rollback_to_an_earlier_own_commit_resumes_from_what_main_holds() -> None:
    history = History()
    history.sink(ME, 5)
    kept = history.sink(ME, 8)
    history.sink(ME, 12)
    history.rollback(kept)
    progress = protocol.read_progress(history.metadata(), SINK)
    assert (progress.resumed_from, progress.frontier, progress.conflict) == ("snapshot", {"next_id": 8}, None)
    assert any("rolled back" in note for note in progress.notes)


def test_damaged_records_of_this_sink_are_a_conflict() -> None:
    history = History()
    history.sink(ME, 5)
    history.properties[protocol.checkpoint_key(SINK)] = "{truncated"
    progress = protocol.read_progress(history.metadata(), SINK)
    assert progress.resumed_from == "conflict" and progress.conflict is not None and "damaged" in progress.conflict
    history = History()
    history.commit({**sink_summary(ME, None), protocol.SINK_VERSION: "v3"}, checkpoint=False)
    assert protocol.read_progress(history.metadata(), SINK).resumed_from == "conflict"


def test_is_on_main() -> None:
    history = History()
    first = history.sink(ME, 1)
    second = history.sink(ME, 2)
    third = history.sink(ME, 3)
    assert protocol.is_on_main(history.metadata(), first)
    history.rollback(second)
    assert not protocol.is_on_main(history.metadata(), third)
    assert protocol.is_on_main(history.metadata(), second)
    assert not protocol.is_on_main(history.metadata(), 424242)


def test_a_rollback_is_told_from_expiry_of_the_sinks_last_snapshot() -> None:
    history = History()
    history.sink(ME, 1)
    kept = history.sink(ME, 2)
    history.sink(ME, 3)
    last = history.commit({"operation-by": "someone"}, checkpoint=False)
    history.sink(ME, 4)
    mine = history.head
    assert mine is not None
    history.commit({"operation-by": "someone"})
    mine_snapshot, last_snapshot = history.snapshot(mine), history.snapshot(last)
    assert not protocol.rolled_back_past(history.metadata(), SINK, mine_snapshot)
    history.expire(mine)  # expiry of the sink's last snapshot (not the head)
    assert not protocol.rolled_back_past(history.metadata(), SINK, mine_snapshot)
    history.rollback(kept)
    assert protocol.rolled_back_past(history.metadata(), SINK, last_snapshot)
    history.expire(last)  # the rolled-back snapshots expired too: main still holds an older commit
    assert protocol.rolled_back_past(history.metadata(), SINK, mine_snapshot)


def test_a_rollback_past_every_commit_then_expiry_of_the_last_one_is_told_from_expiry() -> None:
    history = History()
    before = history.commit({"operation-by": "someone"})
    history.sink(ME, 4, protocol.KIND_FENCE)
    mine = history.sink(ME, 5)
    mine_snapshot = history.snapshot(mine)
    history.rollback(before)
    history.expire(*[s["snapshot-id"] for s in history.snapshots if s["snapshot-id"] != before])
    assert protocol.rolled_back_past(history.metadata(), SINK, mine_snapshot)


# -- the fence decision and the source check ---------------------------------------------------------


def test_only_a_higher_version_fences_at_start_up() -> None:
    history = History()
    history.sink(Writer(SINK, 3, "old-attempt"), 5)
    progress = protocol.read_progress(history.metadata(), SINK)
    assert protocol.startup_fence_owner(progress, ME) is None  # same version, new attempt: takes over
    assert protocol.startup_fence_owner(progress, Writer(SINK, 4, "z")) is None
    assert protocol.startup_fence_owner(progress, Writer(SINK, 2, "z")) == Writer(SINK, 3, "old-attempt")


def test_the_checkpoint_counts_for_the_highest_version() -> None:
    history = History()
    history.sink(Writer(SINK, 2, "a"), 5)
    history.properties[protocol.checkpoint_key(SINK)] = protocol.checkpoint_value(Writer(SINK, 7, "b"), None, 1)
    progress = protocol.read_progress(history.metadata(), SINK)
    assert progress.highest == Writer(SINK, 7, "b")
    assert protocol.startup_fence_owner(progress, ME) == Writer(SINK, 7, "b")


def test_steady_fence_owner_sees_a_newer_claim_in_the_checkpoint_or_above_my_snapshot() -> None:
    history = History()
    mine = history.sink(ME, 5)
    assert protocol.steady_fence_owner(history.metadata(), ME, mine) is None
    same_version_restart = Writer(SINK, 3, "attempt-b")
    history.sink(same_version_restart, 5, protocol.KIND_FENCE)
    assert protocol.steady_fence_owner(history.metadata(), ME, mine) == same_version_restart
    history = History()
    mine = history.sink(ME, 5)
    history.commit(sink_summary(Writer(SINK, 4, "n"), {"next_id": 5}, protocol.KIND_FENCE), checkpoint=False)
    assert protocol.steady_fence_owner(history.metadata(), ME, mine) == Writer(SINK, 4, "n")


def test_a_frontier_of_another_source_is_refused_and_old_frontiers_are_accepted() -> None:
    history = History()
    history.commit(sink_summary(ME, {"next_id": 5}, source=GENERATOR))
    progress = protocol.read_progress(history.metadata(), SINK)
    protocol.check_resumable(progress, GENERATOR)
    with pytest.raises(ProgressConflictError, match="share a sinkId"):
        protocol.check_resumable(progress, {"kind": "files", "path": "file:///in"})
    old = History()
    old.commit(sink_summary(ME, {"next_id": 5}))
    protocol.check_resumable(protocol.read_progress(old.metadata(), SINK), {"kind": "files", "path": "file:///in"})


def test_a_maintenance_snapshot_is_the_sinks_own_with_the_frontier_it_carries() -> None:
    """Recovery and fencing read a maintenance commit as any commit of the sink: its frontier (the one
    already committed) is where a restart resumes, and an outranked writer is fenced by it."""
    history = History()
    history.sink(ME, 10)
    maintenance = history.sink(ME, 10, protocol.KIND_MAINTENANCE)
    metadata = history.metadata()
    progress = protocol.read_progress(metadata, SINK)
    assert progress.resumed_from == "snapshot" and progress.frontier == {"next_id": 10}
    assert progress.last_commit is not None and progress.last_commit.snapshot_id == maintenance
    assert progress.last_commit.kind == protocol.KIND_MAINTENANCE and progress.foreign_snapshots_on_top == 0
    assert protocol.steady_fence_owner(metadata, ME, maintenance) is None
    older = Writer(SINK, 2, "old")
    assert protocol.startup_fence_owner(progress, older) == ME
    history.expire(*[s["snapshot-id"] for s in history.snapshots[:-1]])
    assert protocol.read_progress(history.metadata(), SINK).frontier == {"next_id": 10}
