"""The status of a sync of many tables: finding its tables, the bounded aggregate, and the operator's use of it
(icebergsync/tables/status.py, icebergsync/tables/cuts.py, the operator's status_update and reconcile)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from icebergsync_operator.reconcile import decide
from icebergsync_operator.sql_read import like_pattern
from icebergsync_operator.status_update import TableObservation, with_table
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table.metadata import TableMetadata

from icebergsync import protocol, spec
from icebergsync.metrics.lag import lag_text
from icebergsync.protocol import Writer
from icebergsync.resource_status import SyncStatus
from icebergsync.sink_state import SinkState
from icebergsync.tables import status
from icebergsync.tables.cuts import catalog_cut_support, cut_support, spec_cut_support
from icebergsync.tables.status import Lanes, OtherSinkTable
from tests.unit.test_operator_status_update import SETTINGS, app, cond, observe, reasons, running_status
from tests.unit.test_protocol import GENERATOR, History

SINK = "data/cdc"
ME = Writer(SINK, 2, "a")


def state(table: str, age: float | None = 5.0, lag: dict[str, Any] | None = None, version: int = 2,
          **overrides: Any) -> SinkState:
    fields: dict[str, Any] = dict(
        sink_id=SINK, table=table, sink_version=version, snapshot_id=None if age is None else 100 + len(table),
        committed_at=None if age is None else "2026-05-01T11:59:55+00:00", seconds_since_commit=age,
        kind="data", frontier={table.split(".")[-1]: {"0": 10}}, records_added=5, dead_letters_added=0,
        written_by_version=None if age is None else version, max_event_time=None,
        source_lag=lag if lag is not None else {"records": 0}, total_records=10, resumed_from="snapshot",
        foreign_snapshots_on_top=0,
    )
    fields.update(overrides)
    return SinkState(**fields)


# -- finding the tables --------------------------------------------------------------------------


def test_the_template_matches_the_tables_of_its_namespace_it_can_name() -> None:
    names = ["db.orders", "db.order_lines", "other.orders", "db.a", "dbx.orders", "db.orders.x", "db.orders"]
    assert status.matching("db.{topic}", names) == ["db.a", "db.order_lines", "db.orders"]
    assert status.matching("lake.cdc_{1}_{2}", ["lake.cdc_shop_orders", "lake.cdc_orders", "lake.raw_x_y"]) == [
        "lake.cdc_shop_orders"]
    assert status.namespace_of("lake.cdc_{1}") == "lake" and status.namespace_of("a.b.{topic}") == "a.b"


def test_the_sql_listing_narrows_by_the_templates_text_with_underscores_escaped() -> None:
    assert like_pattern("cdc_{1}_{2}") == "cdc\\_%\\_%"
    assert like_pattern("{topic}") == "%"
    assert like_pattern("x%{topic}") == "x\\%%"


def sink_table(*writers: tuple[Writer, int], lag: int = 0) -> TableMetadata:
    history = History()
    for writer, next_id in writers:
        history.commit(protocol.CommitStatement(writer, protocol.KIND_DATA, {"t": {"0": next_id}},
                                                source=GENERATOR, source_lag={"records": lag}).properties())
    return history.metadata()


def test_a_table_is_the_sinks_when_it_holds_its_checkpoint() -> None:
    mine = status.classify(sink_table((ME, 10)), "db.t", SINK)
    assert isinstance(mine, SinkState) and mine.snapshot_id is not None and mine.frontier == {"t": {"0": 10}}
    assert status.classify(History().metadata(), "db.plain", SINK) is None  # no sink ever wrote it
    other = status.classify(sink_table((Writer("team-b/x", 1, "z"), 3)), "db.theirs", SINK)
    assert other == OtherSinkTable("db.theirs", "team-b/x")
    taken = status.classify(sink_table((ME, 10), (Writer("team-b/x", 1, "z"), 3)), "db.taken", SINK)
    assert isinstance(taken, SinkState) and taken.other_sink == "team-b/x"  # its own table, written by another now


def test_the_sinks_dead_letter_tables_are_not_its_tables() -> None:
    history = History()
    history.commit(protocol.CommitStatement(ME, protocol.KIND_FENCE, {"t": {"0": 1}}, source=GENERATOR).properties(),
                   checkpoint=False)
    history.properties[protocol.checkpoint_key(SINK)] = protocol.checkpoint_value(
        ME, {"t": {"0": 1}}, 1000, source=GENERATOR, snapshot=history.snapshot(1000),
        extra={protocol.MAIN_SNAPSHOT_ID: 7, "main-sequence-number": 3})
    assert status.classify(history.metadata(), "db.t_dlq", SINK) is None


def test_a_damaged_checkpoint_is_reported_as_a_problem_of_the_sinks_table() -> None:
    history = History()
    history.properties[protocol.checkpoint_key(SINK)] = "{not json"
    found = status.classify(history.metadata(), "db.t", SINK)
    assert isinstance(found, SinkState) and found.resumed_from == "conflict"
    assert "cannot be resumed from" in (status.table_status(found).problem or "")


def test_reading_is_bounded_and_reads_only_matching_tables() -> None:
    tables = {f"db.t{index:02d}": sink_table((ME, index)) for index in range(5)}
    read: list[str] = []

    def reader(name: str) -> TableMetadata | None:
        read.append(name)
        return tables.get(name)  # db.gone was dropped since the listing

    names = [*tables, "db.tgone", "db.x", "other.t01"]
    lanes = status.read_lanes("db.t{topic}", names, reader, SINK, limit=3)
    assert read == ["db.t00", "db.t01", "db.t02"]  # name order, at most the limit, never a non-matching name
    assert [lane.table for lane in lanes.states] == read and lanes.unread == 3
    read.clear()
    lanes = status.read_lanes("db.t{topic}", names, reader, SINK)
    assert read == [*tables, "db.tgone"] and len(lanes.states) == 5 and lanes.unread == 0


# -- the aggregate --------------------------------------------------------------------------------


def test_the_aggregate_counts_lagging_tables_and_names_the_worst_and_the_newest() -> None:
    lanes = Lanes((state("db.a", age=30, lag={"records": 50, "partitions": {"a": {"0": 50}}}),
                   state("db.b", age=2, lag={"records": 0}),
                   state("db.c", age=400, lag={"records": 900}),
                   state("db.d", age=None, lag={})),
                  other_sinks=(OtherSinkTable("db.e", "team-b/x"),))
    summary = status.tables_status(lanes)
    assert (summary.count, summary.lagging, summary.worst_lag, summary.worst_lag_table) == (4, 2, "900 records", "db.c")
    assert summary.newest_commit_table == "db.b" and lanes.newest is not None and lanes.newest.table == "db.b"
    assert [item.table for item in summary.items] == ["db.c", "db.a", "db.d", "db.b"]  # worst first, then oldest
    assert summary.items[1].lag == "50 records"  # per-partition detail is left out
    assert summary.other_sinks == ["db.e (team-b/x)"] and summary.other_sink_tables == 1
    assert (summary.omitted, summary.problems) == (0, 0)


def test_tables_with_a_problem_come_first_and_the_list_is_bounded() -> None:
    many = tuple(state(f"db.t{index:03d}", lag={"records": index}) for index in range(30))
    taken = state("db.zz", lag={"records": 0}, other_sink="team-b/x")
    summary = status.tables_status(Lanes((*many, taken), tuple(OtherSinkTable(f"db.o{i}", "b/x") for i in range(25))),
                                   limit=20)
    assert summary.items[0].table == "db.zz" and "team-b/x" in (summary.items[0].problem or "")
    assert summary.items[1].table == "db.t029" and len(summary.items) == 20
    assert (summary.count, summary.omitted, summary.problems) == (31, 11, 1)
    assert len(summary.other_sinks) == 20 and summary.other_sink_tables == 25


def test_a_long_frontier_is_cut() -> None:
    frontier = {f"topic-{index}": {str(p): 10**9 for p in range(8)} for index in range(20)}
    item = status.table_status(state("db.a", frontier=frontier))
    assert item.frontier is not None and len(item.frontier) == status.MAX_FRONTIER_CHARS
    assert item.frontier.endswith(status.ELLIPSIS)
    assert status.table_status(state("db.b")).frontier == '{"b":{"0":10}}'


def test_lag_and_backlogs() -> None:
    assert status.is_lagging(state("db.a", lag={"records": 1})) and not status.is_lagging(state("db.a", lag={}))
    assert status.total_backlog([state("db.a", lag={"records": 3, "partitions": {}}), state("db.b", lag={"records": 4})]) \
        == {"records": 7}
    assert lag_text({"partitions": {"t": {"0": 3}}}) is None


# -- atomic cuts ----------------------------------------------------------------------------------


def test_only_a_sql_catalog_whose_driver_counts_rows_commits_cuts_atomically() -> None:
    assert cut_support("sql", True).atomic and not cut_support("sql", False).atomic
    assert cut_support("rest", True).reason == "CatalogCommitsTablesOneByOne"
    assert spec_cut_support(spec.Catalog(uri="sqlite:///x.db")).atomic
    assert spec_cut_support(spec.Catalog(uri="postgresql://u@h:5432/db")).atomic
    assert not spec_cut_support(spec.Catalog(type="rest", uri="http://rest:8181")).atomic
    assert spec_cut_support(spec.Catalog(uri="nodriver+what://h")).reason == "UnknownSqlDriver"
    catalog = SqlCatalog("c", uri="sqlite:///:memory:", warehouse="file:///tmp/unused")
    assert catalog_cut_support(catalog) == spec_cut_support(spec.Catalog(uri="sqlite:///:memory:"))


def test_a_rest_catalog_commits_cuts_atomically_only_when_its_user_declares_it() -> None:
    declared = spec.Catalog(type="rest", uri="http://nessie:19120/iceberg",
                            properties={"icebergsync.atomic-multi-table-commit": "true"})
    assert spec_cut_support(declared).atomic
    assert spec_cut_support(declared).reason == "RestCatalogDeclaredAtomic"
    for value in ("false", "yes", ""):
        assert not spec_cut_support(spec.Catalog(type="rest", uri="http://rest:8181", properties={
            "icebergsync.atomic-multi-table-commit": value})).atomic
    # The property means nothing to other catalogs: a SQL catalog is decided by its driver alone.
    assert not cut_support("sql", False, True).atomic


# -- the operator ---------------------------------------------------------------------------------


def lanes_observation(*states: SinkState, others: tuple[OtherSinkTable, ...] = ()) -> TableObservation:
    lanes = Lanes(states, others)
    return TableObservation(sink=lanes.newest, lanes=lanes)


REST_CUTS = cut_support("rest", False)


def test_the_status_of_many_tables_carries_the_aggregate_and_the_newest_commit() -> None:
    table = lanes_observation(state("db.a", age=30, lag={"records": 50}), state("db.b", age=2, lag={"records": 7}))
    result = with_table(SyncStatus(), table)
    assert result.tables is not None and result.tables.count == 2
    assert result.last_commit is not None and result.last_commit.snapshot_id == table.sink.snapshot_id
    assert result.seconds_since_last_commit == 2 and result.lag == "57 records"
    assert with_table(result, TableObservation(error="down")).tables == result.tables  # kept while unreadable


def test_a_running_sync_of_many_tables_is_ready_with_its_tables_and_says_whether_cuts_are_atomic() -> None:
    observation = observe(previous=running_status(version=2), applications=(app(2),), table_name="db.{topic}",
                          table=lanes_observation(state("db.a", age=3), state("db.b", age=30, lag={"records": 5})),
                          cuts=REST_CUTS)
    decision = decide(observation, SETTINGS)
    assert decision.status.phase == "Running" and cond(decision, "Ready") == ("True", "Committing")
    ready = next(item for item in decision.status.conditions if item.type == "Ready")
    assert ready.message.startswith("running, 2 tables (1 lagging)") and "to db.a" in ready.message
    assert cond(decision, "AtomicCuts") == ("False", "CatalogCommitsTablesOneByOne")
    single = decide(replace(observation, table_name="db.trips", table=TableObservation(sink=state("db.trips")),
                            cuts=None), SETTINGS)
    assert [item.type for item in single.status.conditions] == ["Ready", "Reconciling", "Stalled"]
    assert single.status.tables is None


def test_a_launch_is_above_the_highest_version_of_any_table() -> None:
    table = lanes_observation(state("db.a", version=2), state("db.b", age=900, version=7))
    decision = decide(observe(table_name="db.{topic}", table=table), SETTINGS)
    assert decision.launch is not None and decision.launch.version == 8


def test_a_table_of_the_sink_another_sink_took_over_stops_the_launch_naming_it() -> None:
    table = lanes_observation(state("db.a"), state("db.b", other_sink="team-b/x"),
                              others=(OtherSinkTable("db.c", "team-c/y"),))
    refused = decide(observe(table_name="db.{topic}", table=table), SETTINGS)
    assert refused.launch is None and reasons(refused) == ["TableInUse"]
    assert "table db.b is written by sink team-b/x" in refused.events[0].message
    # A table the template matches that only another sink ever wrote is reported, not a reason to stop:
    # whether a topic will be routed to it is the source's to say.
    free = decide(observe(table_name="db.{topic}", table=lanes_observation(
        state("db.a"), others=(OtherSinkTable("db.c", "team-c/y"),))), SETTINGS)
    assert free.launch is not None and free.status.tables is not None
    assert free.status.tables.other_sinks == ["db.c (team-c/y)"]


def test_a_fenced_sync_of_many_tables_names_the_owner_version_of_any_table_and_its_tables() -> None:
    fenced = app(2, "FAILED", "driver container failed with ExitCode: 75, Reason: Error")
    table = lanes_observation(state("db.a", version=2), state("db.b", version=9))
    decision = decide(observe(previous=running_status(version=2), applications=(fenced,), table_name="db.{topic}",
                              table=table), SETTINGS)
    assert cond(decision, "Stalled") == ("True", "Fenced")
    assert "version 9" in decision.events[0].message and "owns the tables of db.{topic}" in decision.events[0].message
