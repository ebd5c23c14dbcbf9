"""A table of a sync of many whose key ``spec.tables`` overrides decodes its change records by ITS key: the
sync-wide ``spec.table.key`` named columns such a table may not have (found by
tests/integration/test_many_tables_acceptance.py: order_lines, keyed by (order_id, line_no), crashed the job
locating keys that were all null)."""

from __future__ import annotations

from icebergsync.spec import parse_spec
from spark_app.sources.file_lines import ChangeReading


def test_a_table_decodes_its_changes_by_its_own_key() -> None:
    sync = parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                       "metadata": {"name": "db", "namespace": "test"},
                       "spec": {"source": {"kafka": {"bootstrapServers": "k:9092", "topicPattern": r"db\.(\w+)"}},
                                "table": {"name": "cdc.{1}", "key": ["id"]}, "changes": {"format": "debezium"},
                                "tables": {"cdc.order_lines": {"key": ["order_id", "line_no"]}}}})
    settings = sync.spec.table_settings("cdc.order_lines", "db.order_lines")
    assert settings.key == ["order_id", "line_no"]
    reading = ChangeReading.of(sync.spec, [], settings.key)
    assert reading is not None and reading.key == ("order_id", "line_no")
    default = ChangeReading.of(sync.spec, [])
    assert default is not None and default.key == ("id",)
