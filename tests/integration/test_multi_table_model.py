"""A model-based test of a sync of several tables (Hypothesis stateful testing): lanes, lazy claims, cuts.

One sink syncs three tables from three streams of one source (the ids of a table are the offsets of its
stream) through the real committers and ``commit_trigger`` on a real SQLite catalog, where a trigger's
tables land as one atomic cut. Hypothesis draws launches (an upgrade, or a restarted driver of the newest
version) while older attempts keep running as zombies; triggers of any running attempt touching any
tables, each table claimed by that attempt lazily, before its first commit to it, and planned from the
frontier its claim read; kills; and, on one table, another engine's compaction (every row rewritten),
expiry of every snapshot older than the head, and a rollback of main (never followed by expiry before
the sink commits to that table again: docs/protocol.md, "Limits"). A trigger's cut (spark_app/iceberg/cut.py, one
database transaction moving every table's metadata pointer) may be disturbed: another writer's commit to one of
its tables between the cut's staging and its transaction (the cut must find that pointer moved, land nothing, and
land on the new heads in its next round), the request lost before it landed, the answer lost after it landed (the
committer must find its snapshots on every table or on none), or the process killed right after it landed.

Judged after every step, for every table the sink may resume (not rolled back past every commit of the
sink: a claim of such a table stops the attempt, exit 5): its rows are exactly the ids below the frontier
the sink's newest commit on main (or its checkpoint) records, each once; every data commit on main is by the writer
whose claim is the newest below it. Judged at every trigger: a cut that lands is the head of every table
it touched, with one cut id; a refused trigger (fenced, rolled back) changed no table; every other writer's commit
the cut raced is still there. The run prints its
mix of actions and outcomes and fails when the mix is too thin to judge (``COVERAGE`` for the suite's run, and
``RATES`` scaled to its size for any other run).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import types
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import CommitTableResponse
from pyiceberg.table.snapshots import Operation

from icebergsync import protocol
from icebergsync.errors import FencedError, ProgressConflictError
from icebergsync.protocol import Writer
from spark_app.commit import swap as swap_module
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.iceberg import internals as iceberg_internals
from spark_app.iceberg.cut import TableChange
from spark_app.job.trigger import commit_trigger
from tests.integration.committer_support import SCHEMA, stage
from tests.integration.protocol_model.judging import examples, judge
from tests.integration.protocol_model.world import Killed

SINK = "test/shop"
SOURCE = {"kind": "kafka"}
TABLES = ("ns.lines", "ns.orders", "ns.payments")
COVERAGE = {
    "trigger:landed": 100, "trigger:landed-on-several-tables": 40, "trigger:fenced": 10, "claim:fenced": 3,
    "trigger:zombie-landed": 3, "trigger:rolled-back": 2, "rollback": 10, "expiry": 10, "compaction": 10,
    **{f"cut:{fault}:landed": 5 for fault in ("conflict", "lost-request", "lost-answer", "kill")},
}
# How often random runs exercise each path, per example of 30 steps (measured: the lower of a random run of 120
# examples and the suite's run, rounded down): what a run other than the suite's is judged by
# (protocol_model/judging.py, ``floors``).
RATES = {
    "trigger:landed": 10, "trigger:landed-on-several-tables": 3.9, "trigger:fenced": 0.96, "claim:fenced": 0.32,
    "trigger:zombie-landed": 0.28, "trigger:rolled-back": 0.71, "rollback": 2.2, "expiry": 1.3, "compaction": 2.2,
    # (the cut's faults: half the suite's run's rates, until random runs measure them)
    **{f"cut:{fault}:landed": 0.25 for fault in ("conflict", "lost-request", "lost-answer", "kill")},
}
SUITE_EXAMPLES = 25
ACTIONS = ["trigger"] * 6 + ["launch"] * 2 + ["kill", "compaction", "compaction", "expiry", "expiry", "rollback",
                                              "rollback"]
CUT_FAULTS = ("kill", "lost-answer", "conflict", "lost-request", None, None, None, None, None, None)
STATS: Counter[str] = Counter()


class HookedSqlCatalog(SqlCatalog):
    """The model's SQLite catalog, whose cuts a test disturbs: ``between`` runs once between a cut's staging (the
    new metadata files written) and its database transaction; ``fault`` fails the next cut as a network can (its
    request lost before it landed, its answer lost after) or kills the process right after it landed."""

    between: Callable[[], None] | None = None
    fault: str | None = None

    def _write_metadata(self, *args: Any, **kwargs: Any) -> None:
        super()._write_metadata(*args, **kwargs)
        between, self.between = self.between, None
        if between is not None:
            between()

    def cut(self, real: Callable[[Any, Sequence[TableChange]], list[CommitTableResponse]], catalog: Any,
            changes: Sequence[TableChange]) -> list[CommitTableResponse]:
        """The cut ``real`` (spark_app/iceberg/cut.py) with the next ``fault``."""
        fault, self.fault = self.fault, None
        if fault == "lost-request":
            raise ConnectionError("injected: the request was lost before it reached the catalog")
        responses = real(catalog, changes)
        if fault == "lost-answer":
            raise ConnectionError("injected: the answer was lost after the cut landed")
        if fault == "kill":
            raise Killed
        return responses


def topic(table: str) -> str:
    return f"shop.{table.rsplit('.', 1)[1]}"


def offset(frontier: protocol.Frontier | None, table: str) -> int:
    return int(((frontier or {}).get(topic(table)) or {}).get("0", 0))


@dataclass
class Attempt:
    """One running attempt of the sink: its writer and the committers of the tables it has claimed."""

    writer: Writer
    claimed: dict[str, SinkCommitter] = field(default_factory=dict)


class MultiTableModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="isync-multi-model-"))
        self.catalog = HookedSqlCatalog("test", uri=f"sqlite:///{self.directory}/catalog.db",
                                        warehouse=(self.directory / "warehouse").as_uri())
        self.attempts: list[Attempt] = []
        self.newest = 0
        self.launches = 0
        self.rolled_back: set[str] = set()  # tables rolled back and not committed to by the sink since
        self.raced = dict.fromkeys(TABLES, 0)  # per table, the other writer's commits that raced a cut
        self._real_cut, self._real_time = iceberg_internals.commit_cut, swap_module.time
        iceberg_internals.commit_cut = lambda catalog, changes: self.catalog.cut(self._real_cut, catalog, changes)
        # Retries back off with sleeps; the model needs their decisions, not their waiting.
        swap_module.time = types.SimpleNamespace(  # type: ignore[assignment]
            monotonic=time.monotonic, time=time.time, sleep=lambda seconds: None)

    def teardown(self) -> None:
        iceberg_internals.commit_cut, swap_module.time = self._real_cut, self._real_time
        self.catalog.engine.dispose()
        shutil.rmtree(self.directory, ignore_errors=True)

    @initialize()
    def create_tables(self) -> None:
        self.catalog.create_namespace("ns")
        for name in TABLES:
            self.catalog.create_table(name, SCHEMA)
        self._launch(upgrade=True)

    def _launch(self, upgrade: bool) -> None:
        self.newest += 1 if upgrade or not self.newest else 0
        self.launches += 1
        self.attempts.append(Attempt(Writer(SINK, self.newest, f"a{self.launches}")))
        STATS["launch:upgrade" if upgrade else "launch:restart"] += 1

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        """One action, drawn with triggers dominating (Hypothesis alone would favour some rules over others)."""
        action = data.draw(st.sampled_from(ACTIONS), label="action")
        if action == "trigger":
            self.trigger(data.draw(st.integers(0, 1 << 8), label="which"),
                         data.draw(st.sets(st.sampled_from(TABLES), min_size=1), label="tables"),
                         data.draw(st.lists(st.integers(1, 4), min_size=3, max_size=3), label="sizes"),
                         data.draw(st.sampled_from(CUT_FAULTS), label="fault"))
        elif action == "launch":
            self._launch(data.draw(st.booleans(), label="upgrade"))
        elif action == "kill":
            self.kill(data.draw(st.integers(0, 1 << 8), label="which"))
        else:
            getattr(self, action)(data.draw(st.sampled_from(TABLES), label="table"),
                                  *([data.draw(st.integers(1, 4), label="back")] if action == "rollback" else []))

    def kill(self, which: int) -> None:
        if len(self.attempts) > 1:
            self.attempts.pop(which % len(self.attempts))
            STATS["kill"] += 1

    def trigger(self, which: int, tables: set[str], sizes: list[int], fault: str | None = None) -> None:
        if not self.attempts:
            return
        attempt = self.attempts[which % len(self.attempts)]
        zombie = attempt.writer.version < self.newest
        try:
            for name in sorted(tables - attempt.claimed.keys()):  # claimed lazily, before its first commit
                committer = SinkCommitter(self.catalog, name, attempt.writer)
                committer.start([], SOURCE)
                attempt.claimed[name] = committer
                STATS["claim:landed"] += 1
        except (FencedError, ProgressConflictError) as refused:
            self._stop(attempt, "claim:fenced" if isinstance(refused, FencedError) else "claim:rolled-back")
            return
        heads = {name: self.catalog.load_table(name).metadata.current_snapshot_id for name in tables}
        parts = []
        for name, size in zip(sorted(tables), sizes, strict=False):
            committer = attempt.claimed[name]
            start = offset(committer.frontier, name)  # the frontier of its claim, or of its last commit
            table = self.catalog.load_table(name)
            output = TriggerOutput(data_files=stage(table, attempt.writer, range(start, start + size)), records=size)
            parts.append((committer, output, {topic(name): {"0": start + size}}))
        if fault == "kill" and zombie:
            fault = None  # (a killed zombie would thin the runs that fence one)
        if fault == "conflict":
            self.catalog.between = lambda: self._race(max(tables))
        else:
            self.catalog.fault = fault
        try:
            commits = commit_trigger(parts)
        except Killed:  # the driver restarts: a new attempt of its version
            self.attempts.remove(attempt)
            self._launch(upgrade=False)
            commits = {name: types.SimpleNamespace(snapshot=self.catalog.load_table(name).current_snapshot())
                       for name in tables}  # the cut landed: it must be the head of every table it touched
            assert all(commit.snapshot.snapshot_id != heads[name] for name, commit in commits.items()), \
                f"killed after its cut landed, but {tables} did not all move: {heads}"
        except (FencedError, ProgressConflictError) as refused:
            after = {name: self.catalog.load_table(name).metadata.current_snapshot_id for name in tables}
            assert after == heads, f"a refused trigger changed {tables}: {heads} -> {after}"
            self._stop(attempt, "trigger:fenced" if isinstance(refused, FencedError) else "trigger:rolled-back")
            return
        finally:
            self.catalog.between = self.catalog.fault = None
        cuts = set()
        for name, commit in commits.items():
            table = self.catalog.load_table(name)
            assert table.metadata.current_snapshot_id == commit.snapshot.snapshot_id
            summary = commit.snapshot.summary.additional_properties  # type: ignore[union-attr]
            cuts.add(summary[protocol.CUT])
        assert len(cuts) == 1 and json.loads(cuts.pop()) | {"id": ""} == {
            "atomic": True, "id": "", "tables": len(tables)}
        self.rolled_back -= tables
        STATS["trigger:landed"] += 1
        STATS["trigger:landed-on-several-tables"] += len(tables) > 1
        STATS["trigger:zombie-landed"] += zombie
        if fault is not None:
            STATS[f"cut:{fault}:landed"] += 1

    def _race(self, name: str) -> None:
        """Another writer's commit to table ``name`` (a property of its own) between a cut's staging and its
        transaction: the cut must find that table's pointer moved."""
        self.raced[name] += 1
        with self.catalog.load_table(name).transaction() as transaction:
            transaction.set_properties({"other-writer": str(self.raced[name])})

    def _stop(self, attempt: Attempt, outcome: str) -> None:
        self.attempts.remove(attempt)
        STATS[outcome] += 1

    def compaction(self, name: str) -> None:
        """Another engine rewrites every row of one table (pyiceberg's overwrite: a delete, then the same rows)."""
        table = self.catalog.load_table(name)
        if table.current_snapshot() is not None:
            table.overwrite(table.scan().to_arrow())
            STATS["compaction"] += 1

    def expiry(self, name: str) -> None:
        """Another engine expires every snapshot of one table older than its head."""
        table = self.catalog.load_table(name)
        head = table.current_snapshot()
        if head is not None and name not in self.rolled_back:
            table.maintenance.expire_snapshots().older_than(datetime.fromtimestamp(head.timestamp_ms / 1000)).commit()
            STATS["expiry"] += 1

    def rollback(self, name: str, back: int) -> None:
        """Another engine rolls main of one table back a few snapshots (never to the middle of its own overwrite,
        whose delete snapshot holds none of the rows)."""
        table = self.catalog.load_table(name)
        ancestors = [s for s in protocol.main_ancestry(table.metadata)
                     if s.summary is None or s.summary.operation != Operation.DELETE]
        if len(ancestors) > 1:
            target = ancestors[min(back, len(ancestors) - 1)]
            table.manage_snapshots().rollback_to_snapshot(target.snapshot_id).commit()
            self.rolled_back.add(name)
            STATS["rollback"] += 1

    @invariant()
    def every_table_holds_each_record_below_its_frontier_once(self) -> None:
        if not hasattr(self, "catalog") or (not self.attempts and not self.launches):
            return
        for name in TABLES:
            table = self.catalog.load_table(name)
            progress = protocol.read_progress(table.metadata, SINK)
            if progress.conflict is not None:  # rolled back past every commit of the sink: it stops (exit 5)
                continue
            frontier = progress.frontier
            rows = sorted(table.scan().to_arrow()["id"].to_pylist()) if table.current_snapshot() else []
            assert rows == list(range(offset(frontier, name))), f"{name}: rows {rows}, frontier {frontier}"

    @invariant()
    def every_commit_a_cut_raced_is_still_there(self) -> None:
        for name, raced in self.raced.items():
            stated = self.catalog.load_table(name).metadata.properties.get("other-writer")
            assert stated == (str(raced) if raced else None), f"{name}: a cut undid another writer's commit"

    @invariant()
    def every_data_commit_is_by_the_newest_claim_below_it(self) -> None:
        for name in TABLES:
            table = self.catalog.load_table(name)
            owner = None
            for snapshot in reversed(list(protocol.main_ancestry(table.metadata))):
                commit = protocol.parse_commit(snapshot)
                if commit is None:
                    continue
                if commit.kind == protocol.KIND_FENCE:
                    owner = commit.writer
                elif owner is not None:
                    assert commit.writer == owner, f"{name}: {commit.writer} committed above the claim of {owner}"


def test_multi_table_model(capsys: pytest.CaptureFixture[str]) -> None:
    judge(MultiTableModel, examples(SUITE_EXAMPLES), COVERAGE, STATS, capsys, SUITE_EXAMPLES, RATES)
