"""The status of a sync of many tables read from real catalogs: the operator's bounded reads (a SQLite SQL catalog,
and the suite's REST catalog) and ``icebergsync status`` find the sink's tables by its template and checkpoint,
leave out its dead-letter tables, other namespaces and plain tables, and report another sink's table apart."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import pytest
from icebergsync_operator.kube import KubeApi
from icebergsync_operator.reconcile import decide
from icebergsync_operator.settings import OperatorSettings
from icebergsync_operator.status_update import TableObservation, with_table
from icebergsync_operator.table import observe_table
from pyiceberg.catalog import Catalog

from icebergsync import cli
from icebergsync.protocol import Writer
from icebergsync.resource_status import SyncStatus
from icebergsync.spec import IcebergSync, parse_spec
from icebergsync.tables.cuts import spec_cut_support
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.decoding.deadletter import DEAD_LETTER_SCHEMA
from tests.infra.services import RestCatalog
from tests.integration.committer_support import SCHEMA, stage
from tests.integration.sync_support import catalog_of, write_spec
from tests.unit.test_catalog_access import reach
from tests.unit.test_operator_status_update import NOW, SETTINGS, app, cond, observe, running_status

SINK = "test/shop"
OTHER = "test/other"
SOURCE = {"kind": "kafka"}
READS = reach(OperatorSettings(catalog_timeout=30))


def sync_of(catalog: dict[str, Any], namespace: str) -> IcebergSync:
    return parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                       "metadata": {"name": "shop", "namespace": "test"},
                       "spec": {"source": {"kafka": {"bootstrapServers": "127.0.0.1:9", "topicPattern": r"shop\.(\w+)"}},
                                "schema": [{"name": "id", "type": "long", "required": True}],
                                "table": {"name": f"{namespace}.{{1}}", "catalog": catalog},
                                "deadLetter": {"table": f"{namespace}.{{1}}_dlq"}}})


def commit(catalog: Catalog, writer: Writer, name: str, start: int, end: int, lag: int = 0,
           dead_letters: str | None = None) -> None:
    """``writer`` claims table ``name`` (and its dead-letter table) and commits ids ``[start, end)`` of topic
    ``shop.<table>`` with a backlog of ``lag`` records."""
    committer = SinkCommitter(catalog, name, writer, dead_letter_identifier=dead_letters)
    committer.start([], SOURCE)
    table = catalog.load_table(name)
    output = TriggerOutput(data_files=stage(table, writer, range(start, end)), records=end - start,
                           source_lag={"records": lag, "partitions": {"0": lag}})
    committer.commit(output, {f"shop.{name.rsplit('.', 1)[1]}": {"0": end}})


def populate(catalog: Catalog, namespace: str) -> None:
    """Two tables of the sink (orders lagging by 40 records, lines newest), orders' dead-letter table, a table
    another sink writes, a plain table, and a table of the sink in another namespace."""
    elsewhere = f"{namespace}_x"
    for ns in (namespace, elsewhere):
        catalog.create_namespace_if_not_exists(ns)
    for name in ("orders", "lines", "payments", "plain"):
        catalog.create_table(f"{namespace}.{name}", SCHEMA)
    catalog.create_table(f"{namespace}.orders_dlq", DEAD_LETTER_SCHEMA)
    catalog.create_table(f"{elsewhere}.orders", SCHEMA)
    commit(catalog, Writer(SINK, 1, "a"), f"{namespace}.orders", 0, 5, dead_letters=f"{namespace}.orders_dlq")
    commit(catalog, Writer(SINK, 2, "b"), f"{namespace}.orders", 5, 8, lag=40, dead_letters=f"{namespace}.orders_dlq")
    commit(catalog, Writer(OTHER, 1, "c"), f"{namespace}.payments", 0, 3)
    commit(catalog, Writer(SINK, 2, "b"), f"{elsewhere}.orders", 0, 2)
    commit(catalog, Writer(SINK, 2, "b"), f"{namespace}.lines", 0, 4)


def check_observation(observation: TableObservation, namespace: str) -> None:
    assert observation.error is None and observation.lanes is not None
    lanes = observation.lanes
    assert [state.table for state in lanes.states] == [f"{namespace}.lines", f"{namespace}.orders"]
    assert [(other.table, other.sink_id) for other in lanes.other_sinks] == [(f"{namespace}.payments", OTHER)]
    assert observation.sink is not None and observation.sink.table == f"{namespace}.lines"  # the newest commit
    assert observation.highest_version == 2 and observation.in_use is None

    status = with_table(SyncStatus(), observation)
    tables = status.tables
    assert tables is not None
    assert (tables.count, tables.lagging, tables.worst_lag, tables.worst_lag_table) == (
        2, 1, "40 records", f"{namespace}.orders")
    assert tables.newest_commit_table == f"{namespace}.lines"
    assert [item.table for item in tables.items] == [f"{namespace}.orders", f"{namespace}.lines"]
    orders = tables.items[0]
    assert orders.frontier == '{"shop.orders":{"0":8}}' and orders.sink_version == 2 and orders.lagging
    assert tables.other_sinks == [f"{namespace}.payments ({OTHER})"] and tables.unread == 0
    assert status.last_commit is not None and status.last_commit.snapshot_id == observation.sink.snapshot_id
    assert status.lag == "40 records"


def test_the_operator_reads_a_sql_catalogs_tables_of_the_sink(tmp_path: Path) -> None:
    sync = sync_of({"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": str(tmp_path / "wh")},
                   "shop")
    catalog = catalog_of(sync)
    populate(catalog, "shop")

    observation = observe_table(cast(KubeApi, None), sync, READS)  # no Secret: the API is never called
    check_observation(observation, "shop")

    decision = decide(observe(previous=running_status(version=2), applications=(app(2),), table_name=sync.spec.table.name,
                              table=observation, cuts=spec_cut_support(sync.spec.table.catalog_or_default),
                              now=NOW), SETTINGS)
    assert cond(decision, "Ready") == ("True", "Committing") and cond(decision, "AtomicCuts") == ("True", "SqlCatalog")
    assert decision.status.tables is not None and decision.status.tables.count == 2

    commit(catalog, Writer(OTHER, 2, "d"), "shop.lines", 4, 6)  # another sink takes one of the sink's tables
    taken = observe_table(cast(KubeApi, None), sync, READS)
    assert taken.in_use is not None and (taken.in_use.table, taken.in_use.other_sink) == ("shop.lines", OTHER)


def test_a_namespace_not_created_yet_is_a_sync_of_no_tables(tmp_path: Path) -> None:
    sync = sync_of({"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": str(tmp_path / "wh")},
                   "nothing")
    observation = observe_table(cast(KubeApi, None), sync, READS)
    assert observation.error is None and observation.lanes is not None and observation.lanes.states == ()
    assert with_table(SyncStatus(), observation).tables is not None


def test_icebergsync_status_prints_the_tables_of_a_template(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": str(tmp_path / "wh")}
    sync = sync_of(catalog, "shop")
    populate(catalog_of(sync), "shop")
    document = {"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                "metadata": {"name": "shop", "namespace": "test"},
                "spec": sync.spec.model_dump(by_alias=True, exclude_none=True, mode="json")}
    spec_path = write_spec(tmp_path, document)

    assert cli.main(["status", str(spec_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["atomicCuts"] is True and printed["tables"]["count"] == 2
    assert printed["tables"]["worstLagTable"] == "shop.orders"

    assert cli.main(["status", str(spec_path)]) == 0
    text = capsys.readouterr().out
    assert "shop.orders: snapshot" in text and "lag 40 records" in text and "shop.payments (test/other)" in text


def test_the_operator_reads_a_rest_catalogs_tables_of_the_sink(rest_catalog: RestCatalog) -> None:
    namespace = f"shop_{os.urandom(4).hex()}"  # the server is shared
    populate(rest_catalog.load(), namespace)
    sync = sync_of({"type": "rest", "uri": rest_catalog.uri, "warehouse": rest_catalog.warehouse}, namespace)

    observation = observe_table(cast(KubeApi, None), sync, READS)
    check_observation(observation, namespace)
