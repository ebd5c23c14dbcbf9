"""A randomized, model-based test of the sink protocol (Hypothesis stateful testing).

The real committer and protocol run against a real pyiceberg SQLite catalog with real staged Parquet
files (no Spark). Hypothesis draws sequences of: launches (same version = a restarted driver, higher
version = an upgrade, lower version = a stale pod), triggers of any live sink, including sinks that a
newer one has superseded (racing older versions), kills at any step (before the commit, or right
after any catalog commit of a trigger or a start-up, before the sink sees the answer), snapshot
expiry (one snapshot that is not the head, or everything older than the head), foreign appends,
foreign compaction, a column dropped and re-added by another writer, a rollback of main to any
ancestor, and the table dropped and recreated. The source is ids 0, 1, 2, …; every 7th record is bad and goes to the dead-letter table.

After every step: every source record below the table's frontier is in the table exactly once (bad
ones in the dead-letter table at most once, and all of them after each successful start-up), no
record beyond it is, and each refused operation was refused with the expected clear error having
written nothing. When a rollback went past every commit of the sink, the table holds a gap-free
prefix of the source and every start-up stops with a progress conflict. Each trigger's outcome is
predicted from the table before it runs. (A rollback of the main table alone leaves the dead
letters of the rolled-back range in the dead-letter table, and re-reading produces them again:
dead letters are not checked after a rollback. Expiry is not drawn while main is rolled back past
the checkpoint's snapshot and no start-up has fenced since: once other writers committed on the
rolled-back head and expiry removed what lies between, that is indistinguishable from routine
expiry (docs/protocol.md, "Limits").)

Bounded and derandomized in the suite (the same 25 examples of up to 20 steps every run, so that a
red run is reproducible); run it long and random on demand, e.g.
``ICEBERGSYNC_MODEL_EXAMPLES=2000 ICEBERGSYNC_MODEL_STEPS=60 pytest tests/integration/test_protocol_model.py``,
and turn each failure it finds into a deterministic test (as in tests/integration/test_table_changes.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from pyiceberg.catalog import Catalog
from pyiceberg.types import StringType

from icebergsync import protocol
from icebergsync.errors import FencedError, ProgressConflictError, TableChangedError
from icebergsync.protocol import Writer
from icebergsync.spec import ExpireSnapshots, Maintenance
from spark_app import committer as committer_module
from spark_app.committer import SinkCommitter, TriggerOutput
from spark_app.deadletter import DEAD_LETTER_SCHEMA
from spark_app.job import rebuild_data_file, table_plan
from spark_app.maintenance import Maintainer
from spark_app.writer import TablePlan
from tests.integration.committer_support import SCHEMA, TABLE, dead_letter_rows, open_catalog, stage_rows

DEAD = "ns.dead"
SINK = "ns/model"
SOURCE = {"kind": "generator"}
pytestmark = pytest.mark.slow
EXAMPLES = int(os.environ.get("ICEBERGSYNC_MODEL_EXAMPLES", "25"))
STEPS = int(os.environ.get("ICEBERGSYNC_MODEL_STEPS", "20"))
# Where a trigger's process dies: before its commit, right after the main commit (before the dead-letter
# commit), or just after the catalog accepted its 1st (main) / 2nd (dead-letter) commit.
KILLS = [None, None, "before-commit", "main-committed", "after-commit-1", "after-commit-2"]


def is_bad(record: int) -> bool:
    return record % 7 == 3


class Killed(BaseException):
    """kill -9 of one sink's process: nothing of it runs after this."""


class KillableCatalog:
    """A sink's view of the catalog: the n-th commit lands, then the sink dies before seeing the answer."""

    def __init__(self, catalog: Catalog):
        self._catalog = catalog
        self.kill_after_commits: int | None = None

    def commit_table(self, *args: Any) -> Any:
        response = self._catalog.commit_table(*args)
        if self.kill_after_commits is not None:
            self.kill_after_commits -= 1
            if self.kill_after_commits == 0:
                raise Killed
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)


class Sink:
    """One running attempt: its committer, the plans it writes with, its frontier."""

    def __init__(self, catalog: Catalog, writer: Writer):
        self.catalog = KillableCatalog(catalog)
        self.committer = SinkCommitter(self.catalog, TABLE, writer, DEAD, rebuild_data_file)  # type: ignore[arg-type]
        self.next_id = 0
        self.plan: TablePlan | None = None
        self.dead_plan: TablePlan | None = None
        self.pinned_uuid = ""
        self.pinned_schema = -1
        self.rolled_back = False  # main was rolled back past this sink's last commit

    @property
    def writer(self) -> Writer:
        return self.committer.writer


def check_generator_frontier(frontier: protocol.Frontier) -> None:
    if set(frontier) != {"next_id"}:
        raise ValueError("not a generator frontier")


class ProtocolModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="isync-model-"))
        self.catalog = open_catalog(self.directory)
        self.catalog.create_namespace_if_not_exists("ns")
        self.format_version = "2"
        self.sinks: list[Sink] = []
        self.top_version = 0
        self.attempts = 0
        self.foreign_ids = 0
        self.who_from = 0  # rows of ids at or above this were written after the last column change
        self.dead_letters_complete = True
        self.rolled_back = False
        self.rolled_back_past_checkpoint = False
        self._real_crash_point = committer_module.crash_point
        self._kill_at_main_committed = False
        committer_module.crash_point = self._crash_point

    def _crash_point(self, point: str) -> None:
        if point == "main-committed" and self._kill_at_main_committed:
            raise Killed

    def teardown(self) -> None:
        committer_module.crash_point = self._real_crash_point
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- the world -------------------------------------------------------------------------------

    @initialize(format_version=st.sampled_from(["1", "2"]))
    def create_tables(self, format_version: str) -> None:
        self.format_version = format_version
        self.catalog.create_table(TABLE, SCHEMA, properties={"format-version": format_version})
        self.catalog.create_table(DEAD, DEAD_LETTER_SCHEMA, properties={"format-version": format_version})

    def _table_frontier(self) -> int | None:
        """The frontier the table holds for the sink; None when a rollback made it a conflict."""
        progress = protocol.read_progress(self.catalog.load_table(TABLE).metadata, SINK)
        if progress.conflict is not None:
            assert self.rolled_back and "rolled back" in progress.conflict, progress.conflict
            return None
        return int((progress.frontier or {"next_id": 0})["next_id"])

    def _new_writer(self, version: int) -> Writer:
        self.attempts += 1
        return Writer(SINK, version, f"at{self.attempts}")

    # -- sinks ------------------------------------------------------------------------------------

    @rule(newer=st.booleans(), kill=st.sampled_from([None, None, "after-commit-1", "after-commit-2"]))
    def launch(self, newer: bool, kill: str | None) -> None:
        """A new attempt of the current version (a restarted driver) or of the next one (an upgrade)."""
        self.top_version = max(1, self.top_version + (1 if newer or self.top_version == 0 else 0))
        sink = Sink(self.catalog, self._new_writer(self.top_version))
        sink.catalog.kill_after_commits = int(kill[-1]) if kill else None
        conflict = self._table_frontier() is None
        snapshots_before = len(self.catalog.load_table(TABLE).metadata.snapshots)
        try:
            progress = sink.committer.start([], SOURCE, check_generator_frontier)
        except Killed:
            self.dead_letters_complete = False
            return
        except ProgressConflictError:
            assert conflict, "a start-up refused progress the table holds"
            assert len(self.catalog.load_table(TABLE).metadata.snapshots) == snapshots_before
            return
        assert not conflict, "a start-up resumed after a rollback past every commit of the sink"
        self.rolled_back_past_checkpoint = False  # the new fence put the checkpoint's snapshot on main
        sink.catalog.kill_after_commits = None
        sink.next_id = int((progress.frontier or {"next_id": 0})["next_id"])
        assert sink.next_id == self._table_frontier()
        table, dead = self.catalog.load_table(TABLE), self.catalog.load_table(DEAD)
        sink.plan, sink.dead_plan = table_plan(table), table_plan(dead)
        sink.pinned_uuid, sink.pinned_schema = str(table.metadata.table_uuid), table.metadata.current_schema_id
        self.sinks.append(sink)
        self.dead_letters_complete = True

    @precondition(lambda self: self.top_version > 1)
    @rule()
    def launch_an_older_version(self) -> None:
        """A stale pod of an older version starts: it is fenced and writes nothing."""
        before = self.catalog.load_table(TABLE).metadata.snapshots
        sink = Sink(self.catalog, self._new_writer(self.top_version - 1))
        highest = protocol.read_progress(self.catalog.load_table(TABLE).metadata, SINK).highest
        if highest is None or highest.version < self.top_version:
            return  # the newest version was killed before its fence landed: nothing to race
        try:
            sink.committer.start([], SOURCE, check_generator_frontier)
        except FencedError as fenced:
            assert fenced.by_version == self.top_version
        else:
            raise AssertionError("an older version started after a newer one had fenced the table")
        assert self.catalog.load_table(TABLE).metadata.snapshots == before

    @precondition(lambda self: bool(self.sinks))
    @rule(triggers=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(1, 30), st.sampled_from(KILLS)),
                            min_size=1, max_size=4))
    def triggers(self, triggers: list[tuple[int, int, str | None]]) -> None:
        """A few triggers, each of any live sink: the newest or a superseded one (a racing older attempt)."""
        for which, rows, kill in triggers:
            if self.sinks:
                self.trigger(self.sinks[which % len(self.sinks)], rows, kill)
                self.every_record_below_the_frontier_is_in_the_table_exactly_once()

    def trigger(self, sink: Sink, rows: int, kill: str | None) -> None:
        """One trigger of ``sink``: stage the next ``rows`` records, commit, maybe die on the way."""
        assert sink.plan is not None and sink.dead_plan is not None
        table, dead = self.catalog.load_table(TABLE), self.catalog.load_table(DEAD)
        ids = list(range(sink.next_id, sink.next_id + rows))
        good, bad = [i for i in ids if not is_bad(i)], [i for i in ids if is_bad(i)]
        output = TriggerOutput(records=len(good), dead_letters=len(bad))
        if good:
            output.data_files = stage_rows(table, sink.writer, {"id": good, "who": [f"v{sink.writer.version}"] * len(good)},
                                           sink.plan)
        if bad:
            output.dead_letter_files = stage_rows(dead, sink.writer, dead_letter_rows(sink.writer, bad), sink.dead_plan)
        if kill == "before-commit":
            self.sinks.remove(sink)
            return
        expected = self._expected_outcome(sink)
        snapshots_before = len(table.metadata.snapshots)
        sink.catalog.kill_after_commits = int(kill[-1]) if kill and kill.startswith("after-commit") else None
        self._kill_at_main_committed = kill == "main-committed"
        try:
            sink.committer.commit(output, {"next_id": ids[-1] + 1})
            outcome = "committed"
        except Killed:
            outcome = "killed"
        except FencedError:
            outcome = "fenced"
        except TableChangedError:
            outcome = "table-changed"
        except ProgressConflictError:
            outcome = "rolled-back"
        finally:
            self._kill_at_main_committed = False
            sink.catalog.kill_after_commits = None
        if outcome == "killed":
            assert expected == "committed", f"a sink expected to be {expected} got as far as its commit"
            self.sinks.remove(sink)
            self.dead_letters_complete = self.dead_letters_complete and not bad
            return
        assert outcome == expected, f"{sink.writer}: expected {expected}, got {outcome}"
        if outcome == "committed":
            sink.next_id = ids[-1] + 1
        else:
            assert len(self.catalog.load_table(TABLE).metadata.snapshots) == snapshots_before
            self.sinks.remove(sink)

    def _expected_outcome(self, sink: Sink) -> str:
        metadata = self.catalog.load_table(TABLE).metadata
        if str(metadata.table_uuid) != sink.pinned_uuid or metadata.current_schema_id != sink.pinned_schema:
            return "table-changed"
        checkpoint = protocol.parse_checkpoint(metadata, SINK)
        if checkpoint is None or checkpoint.writer != sink.writer:
            return "fenced"
        return "rolled-back" if sink.rolled_back else "committed"

    # -- other writers and maintenance -------------------------------------------------------------

    @rule(rows=st.integers(0, 5))
    def foreign_append(self, rows: int) -> None:
        ids = [-(self.foreign_ids + i + 1) for i in range(rows)]
        self.foreign_ids += rows
        table = self.catalog.load_table(TABLE)
        table.append(pa.table({"id": ids, "who": ["foreign"] * rows}, schema=table.schema().as_arrow()))

    @rule()
    def foreign_compaction(self) -> None:
        table = self.catalog.load_table(TABLE)
        table.overwrite(table.scan().to_arrow())

    @precondition(lambda self: not self.rolled_back_past_checkpoint)
    @rule(which=st.integers(0, 1 << 16))
    def expire_one_snapshot_below_the_head(self, which: int) -> None:
        table = self.catalog.load_table(TABLE)
        head = table.metadata.current_snapshot_id
        candidates = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != head]
        if candidates:
            table.maintenance.expire_snapshots().by_id(candidates[which % len(candidates)]).commit()

    @precondition(lambda self: not self.rolled_back_past_checkpoint)
    @rule()
    def expire_everything_older_than_the_head(self) -> None:
        table = self.catalog.load_table(TABLE)
        head = table.metadata.current_snapshot()
        if head is not None:
            table.maintenance.expire_snapshots().older_than(datetime.fromtimestamp(head.timestamp_ms / 1000)).commit()

    @precondition(lambda self: not self.rolled_back_past_checkpoint)
    @rule(which=st.integers(0, 1 << 16), retain=st.integers(1, 3))
    def a_sink_expires_snapshots_under_its_fence(self, which: int, retain: int) -> None:
        """Built-in expiry (spark_app/maintenance.py) by any live sink: a fenced one expires nothing, a
        running one expires everything but the newest ``retain`` and deletes the files only they read."""
        if not self.sinks:
            return
        sink = self.sinks[which % len(self.sinks)]
        expected = self._expected_outcome(sink)
        settings = Maintenance(expire_snapshots=ExpireSnapshots(older_than="0s", retain_last=retain))
        maintainer = Maintainer(settings, sink.committer, sink.catalog, TABLE, 1 << 20)  # type: ignore[arg-type]
        snapshots_before = len(self.catalog.load_table(TABLE).metadata.snapshots)
        try:
            maintainer.expire_snapshots(now_ms=int(time.time() * 1000) + 1000)
            outcome = "committed"
        except FencedError:
            outcome = "fenced"
        except TableChangedError:
            outcome = "table-changed"
        except ProgressConflictError:
            outcome = "rolled-back"
        assert outcome == expected, f"{sink.writer}: expected {expected}, got {outcome}"
        if outcome != "committed":
            assert len(self.catalog.load_table(TABLE).metadata.snapshots) == snapshots_before
            self.sinks.remove(sink)

    @rule()
    def another_writer_drops_and_re_adds_a_column(self) -> None:
        with self.catalog.load_table(TABLE).update_schema() as update:
            update.delete_column("who")
        with self.catalog.load_table(TABLE).update_schema() as update:
            update.add_column("who", StringType())
        frontier = self._table_frontier()
        self.who_from = frontier if frontier is not None else 1 << 62  # stopped: nothing more is written

    @rule(which=st.integers(0, 1 << 16))
    def another_writer_rolls_main_back(self, which: int) -> None:
        table = self.catalog.load_table(TABLE)
        ancestors = [s.snapshot_id for s in protocol.main_ancestry(table.metadata)][1:]
        if not ancestors:
            return
        target = ancestors[which % len(ancestors)]
        history = [s.snapshot_id for s in protocol.main_ancestry(table.metadata)]
        def above_target(snapshot_id: int | None) -> bool:
            return snapshot_id in history and history.index(snapshot_id) < history.index(target)

        for sink in self.sinks:  # main keeps a sink's last commit iff it is at or below the target
            sink.rolled_back = sink.rolled_back or above_target(sink.committer.last_snapshot_id)
        checkpoint = protocol.parse_checkpoint(table.metadata, SINK)
        if checkpoint is not None and above_target(checkpoint.snapshot_id):
            self.rolled_back_past_checkpoint = True
        table.manage_snapshots().rollback_to_snapshot(target).commit()
        self.rolled_back = True

    @rule()
    def recreate_the_tables(self) -> None:
        for identifier in (TABLE, DEAD):
            self.catalog.drop_table(identifier)
        self.create_tables(self.format_version)
        self.who_from = 0
        self.foreign_ids = 0
        self.dead_letters_complete = True
        self.rolled_back = False
        self.rolled_back_past_checkpoint = False

    # -- the invariant -----------------------------------------------------------------------------

    @invariant()
    def every_record_below_the_frontier_is_in_the_table_exactly_once(self) -> None:
        if not self.catalog.table_exists(TABLE):
            return
        frontier = self._table_frontier()
        rows = self.catalog.load_table(TABLE).scan().to_arrow()
        ids, who = rows.column("id").to_pylist(), rows.column("who").to_pylist()
        source_ids = sorted(i for i in ids if i >= 0)
        if frontier is None:  # stopped by a rollback past every commit: what main holds has no gap
            frontier = source_ids[-1] + 1 if source_ids else 0
        assert source_ids == [i for i in range(frontier) if not is_bad(i)], "lost or duplicated records"
        foreign = sorted(i for i in ids if i < 0)
        if self.rolled_back:
            assert len(foreign) == len(set(foreign)) and set(foreign) <= set(range(-self.foreign_ids, 0))
        else:
            assert foreign == list(range(-self.foreign_ids, 0)), "another writer's rows changed"
        missing_column = [i for i, value in zip(ids, who, strict=True) if i >= self.who_from and value is None]
        assert missing_column == [], f"rows written after the column change read null: {missing_column[:5]}"
        if self.rolled_back:
            return
        payloads = self.catalog.load_table(DEAD).scan().to_arrow().column("payload").to_pylist()
        dead = sorted(int(p) for p in payloads)
        expected_dead = [i for i in range(frontier) if is_bad(i)]
        assert len(dead) == len(set(dead)), "a dead letter is in the dead-letter table twice"
        assert set(dead) <= set(expected_dead), "a dead letter beyond the frontier"
        if self.dead_letters_complete:
            assert dead == expected_dead, "dead letters lost"


ProtocolModel.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
    derandomize="ICEBERGSYNC_MODEL_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_protocol_model = ProtocolModel.TestCase
