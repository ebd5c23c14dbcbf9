"""The ``SourceSettings`` condition and ``icebergsync status`` read from the table.

A Debezium sync's data commits note what its events showed of the documented Debezium settings
(``icebergsync.source-notes``, icebergsync/source_settings/checks.py). Read from a real SQLite catalog, as the
operator and the command line read every status: the newest data commit's notes make the condition False (a
warning) with the setting's reason and fix, a fence commit on top does not clear it, and a later data commit whose
events no longer show it does; a sync of plain records has no such condition.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from icebergsync_operator.kube import KubeApi
from icebergsync_operator.reconcile import Decision, decide
from icebergsync_operator.settings import OperatorSettings
from icebergsync_operator.table import observe_table

from icebergsync import cli
from icebergsync.protocol import Writer
from icebergsync.source_settings.checks import EVENTS_WITHOUT_TRANSACTION, RECORDS_WITHOUT_SCHEMA
from icebergsync.spec import IcebergSync, parse_spec
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.trigger_output import TriggerOutput
from tests.integration.committer_support import SCHEMA, stage
from tests.integration.sync_support import catalog_of, write_spec
from tests.unit.test_catalog_access import reach
from tests.unit.test_operator_status_update import NOW, SETTINGS, app, observe, running_status

TABLE = "shop.customers"
READS = reach(OperatorSettings(catalog_timeout=30))


def document_of(directory: Path, changes: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": {"kafka": {"bootstrapServers": "127.0.0.1:9", "topic": "dbserver1.public.customers"}},
        "schema": [{"name": "id", "type": "long", "required": True}, {"name": "who", "type": "string"}],
        "table": {"name": TABLE, "key": ["id"],
                  "catalog": {"type": "sql", "uri": f"sqlite:///{directory}/catalog.db",
                              "warehouse": str(directory / "wh")}}}
    if changes is not None:
        spec["changes"] = changes
    return {"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
            "metadata": {"name": "customers", "namespace": "test"}, "spec": spec}


def commit(sync: IcebergSync, version: int, start: int, end: int, notes: dict[str, Any] | None) -> None:
    """Version ``version`` of the sink claims the table and commits ids ``[start, end)`` with source ``notes``."""
    catalog = catalog_of(sync)
    catalog.create_namespace_if_not_exists("shop")
    if not catalog.table_exists(TABLE):
        catalog.create_table(TABLE, SCHEMA)
    writer = Writer(sync.sink_id, version, f"a{version}")
    committer = SinkCommitter(catalog, TABLE, writer)
    committer.start([], {"kind": "kafka"})
    table = catalog.load_table(TABLE)
    if end > start:
        output = TriggerOutput(data_files=stage(table, writer, range(start, end)), records=end - start,
                               source_notes=notes)
        committer.commit(output, {"dbserver1.public.customers": {"0": end}})


def reconciled(sync: IcebergSync, previous: Decision | None = None) -> Decision:
    """The operator's decision for a running sync from what the table says now."""
    table = observe_table(cast(KubeApi, None), sync, READS)  # no Secret: the API is never called
    status = previous.status if previous is not None else running_status(version=2)
    return decide(observe(previous=status, applications=(app(2),), table_name=TABLE, table=table, now=NOW,
                          debezium_changes=sync.spec.changes is not None), SETTINGS)


def source_settings(decision: Decision) -> tuple[str, str, str] | None:
    found = next((item for item in decision.status.conditions if item.type == "SourceSettings"), None)
    return (found.status, found.reason, found.message) if found is not None else None


def test_the_newest_data_commit_sets_the_condition_and_a_later_one_clears_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = document_of(tmp_path, {"format": "debezium"})
    sync = parse_spec(document)
    spec_path = write_spec(tmp_path, document)
    commit(sync, 1, 0, 5, {RECORDS_WITHOUT_SCHEMA: 5, "offsets-without-records": 2})
    commit(sync, 2, 0, 0, None)  # a fence of the next version on top: the newest DATA commit still says it

    warned = reconciled(sync)
    status, reason, message = source_settings(warned) or ("", "", "")
    assert (status, reason) == ("False", "RecordsWithoutSchema")
    assert "value.converter.schemas.enable=true" in message and f"{TABLE}:" in message and "(5 events)" in message
    assert cli.main(["status", str(spec_path)]) == 0
    assert "WARNING: source settings (RecordsWithoutSchema)" in capsys.readouterr().out
    assert cli.main(["status", str(spec_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source_settings"]["reason"] == "RecordsWithoutSchema"

    assert [(event.type, event.reason) for event in warned.events] == [("Warning", "SourceSettings")]
    assert reconciled(sync, warned).events == ()  # told once

    commit(sync, 2, 5, 8, {EVENTS_WITHOUT_TRANSACTION: 3})  # the schema is back; another setting is missing
    assert source_settings(reconciled(sync, warned))[:2] == ("False", "NoTransactionMetadata")  # type: ignore[index]
    commit(sync, 2, 8, 9, {"offsets-without-records": 1})
    cleared = reconciled(sync, warned)
    assert source_settings(cleared)[:2] == ("True", "AsDocumented")  # type: ignore[index]
    assert cli.main(["status", str(spec_path)]) == 0
    assert "WARNING" not in capsys.readouterr().out


def test_a_sync_of_plain_records_has_no_source_settings_condition(tmp_path: Path) -> None:
    sync = parse_spec(document_of(tmp_path, None))
    commit(sync, 1, 0, 3, {RECORDS_WITHOUT_SCHEMA: 3})
    assert source_settings(reconciled(sync)) is None
