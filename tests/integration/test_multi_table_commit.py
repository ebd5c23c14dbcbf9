"""One trigger of a sync of several tables (spark_app/job/trigger.py) on real catalogs: one atomic cut on
SQLite, table by table on a REST catalog; each table's commit carries its own frontier and fence, a fence on
one table refuses the whole cut, a zombie older version lands only on tables the new version has not claimed
(which the claim then resumes from), and a kill -9 between two table commits leaves each table exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.table import Table
from sqlalchemy import event
from sqlalchemy.orm import Session

from icebergsync import protocol
from icebergsync.errors import FencedError
from icebergsync.protocol import Frontier, Writer
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.faults import CRASH_ENV
from spark_app.job.trigger import commit_trigger
from tests.infra.services import RestCatalog
from tests.integration.committer_support import SCHEMA, open_catalog, stage

SINK = "test/shop"
SOURCE = {"kind": "kafka"}
TABLES = ("ns.lines", "ns.orders")


def create_tables(catalog: Catalog) -> None:
    catalog.create_namespace_if_not_exists("ns")
    for name in TABLES:
        catalog.create_table(name, SCHEMA)


def claim(catalog: Catalog, writer: Writer, name: str) -> tuple[SinkCommitter, Frontier | None]:
    """``writer``'s claim of one table: its committer, and the frontier the claim read on the table."""
    committer = SinkCommitter(catalog, name, writer)
    return committer, committer.start([], SOURCE).frontier


def topic(name: str) -> str:
    """The topic routed to table ``name``: ``shop.<table>``."""
    return f"shop.{name.rsplit('.', 1)[1]}"


def trigger_part(committer: SinkCommitter, start: int, end: int) -> tuple[SinkCommitter, TriggerOutput, Frontier]:
    """Offsets ``[start, end)`` of the table's topic (partition 0), staged as ids, with their frontier."""
    table = committer.catalog.load_table(committer.identifier)
    output = TriggerOutput(data_files=stage(table, committer.writer, range(start, end)), records=end - start)
    return committer, output, {topic(committer.identifier): {"0": end}}


def ids(table: Table) -> list[int]:
    return sorted(table.scan().to_arrow()["id"].to_pylist())


def sink_data(table: Table) -> list[dict[str, str]]:
    """The summaries of the sink's data commits on main, oldest first."""
    summaries = [s.summary.additional_properties for s in reversed(list(protocol.main_ancestry(table.metadata)))
                 if s.summary is not None]
    return [p for p in summaries if p.get(protocol.SINK_ID) == SINK and p.get(protocol.KIND) == protocol.KIND_DATA]


def test_a_trigger_lands_on_every_table_it_touched_as_one_atomic_cut(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    create_tables(catalog)
    writer = Writer(SINK, 1, "a")
    lines, orders = (claim(catalog, writer, name)[0] for name in TABLES)

    commits = commit_trigger([trigger_part(orders, 0, 5), trigger_part(lines, 0, 15)])

    assert sorted(commits) == list(TABLES)
    cuts = []
    for name in TABLES:
        table = catalog.load_table(name)
        [summary] = sink_data(table)
        assert json.loads(summary[protocol.FRONTIER]) == {topic(name): {"0": 15 if name == "ns.lines" else 5}}
        assert protocol.read_progress(table.metadata, SINK).frontier == json.loads(summary[protocol.FRONTIER])
        cuts.append(json.loads(summary[protocol.CUT]))
    assert cuts[0] == cuts[1] and cuts[0]["atomic"] is True and cuts[0]["tables"] == 2


def test_a_fence_on_one_table_refuses_the_whole_cut(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    create_tables(catalog)
    old = Writer(SINK, 1, "a")
    lines, orders = (claim(catalog, old, name)[0] for name in TABLES)
    claim(catalog, Writer(SINK, 2, "b"), "ns.orders")  # the newer version has claimed one table only
    parts = [trigger_part(orders, 0, 5), trigger_part(lines, 0, 15)]
    lines_head = catalog.load_table("ns.lines").metadata.current_snapshot_id

    with pytest.raises(FencedError):
        commit_trigger(parts)

    assert catalog.load_table("ns.lines").metadata.current_snapshot_id == lines_head  # nothing of the cut landed
    assert not any(Path(f.file_path.removeprefix("file://")).exists()
                   for _, output, _ in parts for f in output.data_files)


def test_a_zombie_lands_only_on_tables_not_yet_claimed_and_the_claim_resumes_after_it(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    create_tables(catalog)
    zombie = Writer(SINK, 1, "a")
    old_lines, old_orders = (claim(catalog, zombie, name)[0] for name in TABLES)
    commit_trigger([trigger_part(old_orders, 0, 5), trigger_part(old_lines, 0, 15)])
    newer = Writer(SINK, 2, "b")
    new_orders, resumed = claim(catalog, newer, "ns.orders")  # lazily: lines has no records for it yet
    assert resumed == {"shop.orders": {"0": 5}}

    commit_trigger([trigger_part(old_lines, 15, 30)])  # lines is not claimed by version 2: the zombie lands
    new_lines, resumed = claim(catalog, newer, "ns.lines")
    assert resumed == {"shop.lines": {"0": 30}}  # the claim read what the zombie landed: planned from there
    with pytest.raises(FencedError):
        commit_trigger([trigger_part(old_lines, 30, 45)])
    commit_trigger([trigger_part(new_lines, 30, 40), trigger_part(new_orders, 5, 8)])

    assert ids(catalog.load_table("ns.lines")) == list(range(40))
    assert ids(catalog.load_table("ns.orders")) == list(range(8))
    writers = [summary[protocol.SINK_VERSION] for summary in sink_data(catalog.load_table("ns.lines"))]
    assert writers == ["1", "1", "2"]


def test_a_rest_catalog_commits_the_tables_one_at_a_time(rest_catalog: RestCatalog) -> None:
    catalog = rest_catalog.load()
    names = _fresh_namespace(catalog)
    lines, orders = (claim(catalog, Writer(SINK, 1, "a"), name)[0] for name in names)

    commit_trigger([trigger_part(orders, 0, 5), trigger_part(lines, 0, 15)])

    for name, end in zip(names, (15, 5), strict=True):
        [summary] = sink_data(catalog.load_table(name))
        assert json.loads(summary[protocol.FRONTIER]) == {topic(name): {"0": end}}
        assert json.loads(summary[protocol.CUT])["atomic"] is False


CRASHING_TRIGGER = """
import json, sys
from pyiceberg.catalog import load_catalog
from icebergsync.protocol import Writer
from tests.integration.test_multi_table_commit import claim, commit_trigger, trigger_part
names, properties = json.loads(sys.argv[1]), json.loads(sys.argv[2])
catalog = load_catalog("rest", **properties)
lines, orders = (claim(catalog, Writer("test/shop", 1, "a"), name)[0] for name in names)
commit_trigger([trigger_part(orders, 0, 5), trigger_part(lines, 0, 15)])
"""


def test_a_kill_between_two_table_commits_leaves_each_table_exactly_once(rest_catalog: RestCatalog) -> None:
    catalog = rest_catalog.load()
    names = _fresh_namespace(catalog)
    crashed = subprocess.run([sys.executable, "-c", CRASHING_TRIGGER, json.dumps(names),
                              json.dumps(rest_catalog.properties)],
                             env={**os.environ, CRASH_ENV: "table-committed:1"}, capture_output=True, text=True,
                             timeout=300)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr

    # The first table (in identifier order) has the trigger, the other not: each resumes from its own frontier.
    restart = Writer(SINK, 1, "b")
    (_, lines_from), (orders, orders_from) = (claim(catalog, restart, name) for name in names)
    assert lines_from == {"shop.lines": {"0": 15}}
    assert orders_from is None
    commit_trigger([trigger_part(orders, 0, 5)])  # the restart re-reads only what orders lacks

    reread = load_catalog("rest", **rest_catalog.properties)
    assert ids(reread.load_table(names[0])) == list(range(15))
    assert ids(reread.load_table(names[1])) == list(range(5))


def _fresh_namespace(catalog: Catalog) -> list[str]:
    """``<namespace>.lines`` and ``<namespace>.orders`` in a namespace of their own (the server is shared)."""
    namespace = f"ns_{os.urandom(4).hex()}"
    catalog.create_namespace(namespace)
    names = [f"{namespace}.lines", f"{namespace}.orders"]
    for name in names:
        catalog.create_table(name, SCHEMA)
    return names


def test_an_answer_lost_after_the_cut_landed_finds_it_on_every_table(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    create_tables(catalog)
    writer = Writer(SINK, 1, "a")
    lines, orders = (claim(catalog, writer, name)[0] for name in TABLES)
    lost: list[int] = []

    def lose_the_answer(_session: Session) -> None:  # the database committed; the answer never arrives
        if not lost:
            lost.append(1)
            raise ConnectionError("connection reset after COMMIT")

    event.listen(Session, "after_commit", lose_the_answer)
    try:
        commits = commit_trigger([trigger_part(orders, 0, 5), trigger_part(lines, 0, 15)])
    finally:
        event.remove(Session, "after_commit", lose_the_answer)

    assert lost
    for name, end in zip(TABLES, (15, 5), strict=True):
        table = catalog.load_table(name)
        assert ids(table) == list(range(end))  # landed once, found by the search: not committed again
        assert table.metadata.current_snapshot_id == commits[name].snapshot.snapshot_id
