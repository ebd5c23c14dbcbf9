"""The spec model: defaults, and every problem reported with its field path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from icebergsync.catalog import catalog_properties
from icebergsync.errors import SpecError
from icebergsync.spec import Catalog, load_spec, parse_spec, qualified_sink_id
from icebergsync.units import parse_duration, parse_size

VALID: dict[str, Any] = {
    "apiVersion": "icebergsync.io/v1alpha1",
    "kind": "IcebergSync",
    "metadata": {"name": "trips", "namespace": "data"},
    "spec": {
        "source": {"generator": {"rowsPerSecond": 10}},
        "table": {"name": "demo.trips", "partitionBy": ["day(ts)", "bucket(16, vendor)"]},
    },
}


def with_spec(**changes: Any) -> dict[str, Any]:
    document = copy.deepcopy(VALID)
    document["spec"].update(changes)
    return document


def problems_of(document: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_spec(document)
    return caught.value.problems


def test_defaults_and_sink_id() -> None:
    sync = parse_spec(VALID)
    assert sync.sink_id == "data/trips"
    assert sync.spec.commit.interval_seconds == 30
    assert sync.spec.commit.target_file_bytes == 512 * 1024**2
    assert sync.spec.table.catalog is None and sync.spec.table.catalog_or_default.type == "sql"
    assert sync.spec.source.kind == "generator"


def test_the_sink_id_is_always_qualified_by_the_syncs_own_namespace() -> None:
    assert parse_spec(with_spec(sinkId="ledger")).sink_id == "data/ledger"
    assert parse_spec(with_spec(sinkId="data/ledger")).sink_id == "data/ledger"  # its own prefix is not doubled


@pytest.mark.parametrize("sink_id", ["team-b/trips", "data/team-b/trips", "/trips"])
def test_a_sink_id_naming_another_namespace_is_refused(sink_id: str) -> None:
    assert problems_of(with_spec(sinkId=sink_id)) == [
        f"spec.sinkId: {sink_id!r} is not a sink of namespace data: the sink id is always <namespace>/<sinkId> "
        "(data/…), so give the sink's name alone, without '/'"]


def test_an_unvalidated_foreign_sink_id_still_stays_in_its_namespace() -> None:
    """The qualification holds by construction, not only through validation."""
    assert qualified_sink_id("team-a", "trips", "team-b/trips") == "team-a/team-b/trips"
    assert qualified_sink_id("team-a", "trips", None) == "team-a/trips"


def test_exactly_one_source() -> None:
    files = {"path": "/in", "format": "json"}
    problems = problems_of(with_spec(source={"generator": {}, "files": files}, schema=[{"name": "a", "type": "long"}]))
    assert any(p.startswith("spec.source") and "exactly one" in p for p in problems)
    assert any("exactly one" in p for p in problems_of(with_spec(source={})))


def test_every_problem_is_reported_with_its_path() -> None:
    document = with_spec(
        commit={"interval": "30x", "targetFileSize": "big"},
        table={"name": "nodots", "partitionBy": ["bucket(x, vendor)"]},
        surprise=True,
    )
    problems = problems_of(document)
    joined = "\n".join(problems)
    assert "spec.commit.interval: must be a duration, e.g. 500ms, 30s, 5m or 1h30m (got '30x')" in joined
    assert "spec.commit.targetFileSize: must be a size, e.g. 134217728, 128Mi, 512MB or 1Gi (got 'big')" in joined
    assert "spec.table.name: 'nodots' is not valid" in joined
    assert "spec.table.partitionBy[0]" in joined
    assert "spec.surprise" in joined
    assert len(problems) >= 5


def test_partition_columns_must_exist_and_fit() -> None:
    problems = problems_of(with_spec(table={"name": "a.b", "partitionBy": ["day(vendor)", "bucket(4, nope)"]}))
    assert "spec.table.partitionBy[0]: 'day(vendor)' needs a date or timestamp column, 'vendor' is string" in problems
    assert "spec.table.partitionBy[1]: column 'nope' is not in the schema" in problems


def test_schema_required_for_files_and_types_checked() -> None:
    files = {"files": {"path": "/in"}}
    assert any("schema is required" in p for p in problems_of(with_spec(source=files)))
    problems = problems_of(with_spec(source=files, schema=[{"name": "a", "type": "varchar"}]))
    assert any(p.startswith("spec.schema[0].type") for p in problems)


def test_dead_letter_table_must_differ() -> None:
    assert any("deadLetter.table must differ" in p for p in problems_of(with_spec(deadLetter={"table": "demo.trips"})))


def test_kafka_starting_offsets_form() -> None:
    kafka = {"bootstrapServers": "b:9092", "topic": "t", "startingOffsets": "{oops"}
    problems = problems_of(with_spec(source={"kafka": kafka}, schema=[{"name": "a", "type": "long"}]))
    assert any(p.startswith("spec.source.kafka.startingOffsets") for p in problems)


def test_load_spec_finds_the_document(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import yaml

    path = tmp_path / "sync.yaml"
    path.write_text("---\nkind: ConfigMap\n---\n" + yaml.safe_dump(VALID))
    assert load_spec(path).metadata.name == "trips"
    path.write_text("a: [")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(path)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("text", "size"), [("512Mi", 512 * 1024**2), ("1Gi", 1024**3), ("100MB", 100_000_000), ("42", 42)])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_bad_units() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")
    with pytest.raises(ValueError, match="not a size"):
        parse_size("12XB")


def test_every_source_kind_has_a_reader_and_a_crd_rule() -> None:
    from icebergsync.cel_rules import CEL_RULES
    from icebergsync.spec import SOURCE_KINDS
    from spark_app.sources.registry import SOURCE_CLASSES

    assert SOURCE_KINDS == ("generator", "files", "kafka")
    assert tuple(SOURCE_CLASSES) == SOURCE_KINDS
    rule = CEL_RULES["spec.source"][0]["rule"]
    assert all(f"has(self.{kind})" in rule for kind in SOURCE_KINDS)


CDC_SCHEMA = [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"},
              {"name": "updated_at", "type": "timestamptz"}, {"name": "score", "type": "double", "required": True}]


def cdc_spec(table: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return with_spec(source={"files": {"path": "/in"}}, schema=CDC_SCHEMA,
                     table={"name": "shop.customers", **table}, **changes)


def test_changes_by_key_in_debezium_and_upsert_formats() -> None:
    spec = parse_spec(cdc_spec({"key": ["id"], "partitionBy": ["day(updated_at)"]}, changes={"format": "debezium"})).spec
    assert spec.table.key == ["id"] and spec.changes is not None and spec.changes.format == "debezium"
    assert spec.keyed
    assert parse_spec(cdc_spec({"key": ["id"]}, changes={"format": "upsert"})).spec.changes.format == "upsert"  # type: ignore[union-attr]
    assert spec.changes.deletes == "position", "the older row of a key is deleted by position unless asked"
    equality = parse_spec(cdc_spec({"key": ["id"]}, changes={"format": "upsert", "deletes": "equality"})).spec
    assert equality.changes is not None and equality.changes.deletes == "equality"
    assert any(p.startswith("spec.changes.deletes") for p in problems_of(
        cdc_spec({"key": ["id"]}, changes={"format": "upsert", "deletes": "dv"})))
    assert not parse_spec(VALID).spec.keyed


def test_copy_on_write_below_defaults_to_the_compaction_floor_and_0_or_equality_turns_it_off() -> None:
    def below(**changes: Any) -> int:
        spec = parse_spec(cdc_spec({"key": ["id"]}, changes={"format": "debezium", **changes})).spec
        assert spec.changes is not None
        return spec.changes.copy_on_write_bytes

    assert below() == 256 * 1024
    assert below(copyOnWriteBelow="1Mi") == 1024**2
    assert below(copyOnWriteBelow="0") == 0
    assert below(deletes="equality") == 0
    assert any(p.startswith("spec.changes.copyOnWriteBelow") for p in problems_of(
        cdc_spec({"key": ["id"]}, changes={"format": "debezium", "copyOnWriteBelow": "-1"})))


def test_changes_without_a_key_are_refused_at_their_path() -> None:
    from icebergsync.spec import CHANGES_NEED_KEY_MESSAGE

    assert problems_of(cdc_spec({}, changes={"format": "debezium"})) == [f"spec.changes: {CHANGES_NEED_KEY_MESSAGE}"]
    assert any(p.startswith("spec.table.key") for p in problems_of(cdc_spec({"key": []}, changes={"format": "upsert"})))
    assert any(p.startswith("spec.changes.format") for p in problems_of(cdc_spec({"key": ["id"]}, changes={"format": "x"})))
    assert any(p.startswith("spec.changes.format") for p in problems_of(cdc_spec({"key": ["id"]}, changes={})))


def test_changes_need_the_files_or_kafka_source() -> None:
    problems = problems_of(with_spec(table={"name": "demo.trips", "key": ["id"]}, changes={"format": "upsert"}))
    assert problems == ["spec.changes: changes needs the files or kafka source"]


def test_key_columns_are_required_columns_of_the_schema() -> None:
    problems = problems_of(cdc_spec({"key": ["id", "nope", "name", "score", "id"]}, changes={"format": "upsert"}))
    assert problems == [
        "spec.table.key[1]: column 'nope' is not in the schema",
        "spec.table.key[2]: column 'name' must be required (a key column is never null)",
        "spec.table.key[3]: column 'score' is double; a key column cannot be float, double, an array, a map or a struct",
        "spec.table.key[4]: column 'id' is listed twice",
    ]


def test_changes_refuse_a_transform_and_non_json_files() -> None:
    keyed = {"schema": [{"name": "id", "type": "long", "required": True}],
             "table": {"name": "a.b", "key": ["id"]}, "changes": {"format": "upsert"}}
    transformed = problems_of(with_spec(**keyed, source={"files": {"path": "/in"}}, transform="SELECT * FROM source"))
    assert any(p.startswith("spec.transform: not supported with spec.changes") for p in transformed), transformed
    csv = problems_of(with_spec(**keyed, source={"files": {"path": "/in", "format": "csv"}}))
    assert any(p.startswith("spec.source.files.format:") and "'csv' is not supported" in p for p in csv), csv
    assert parse_spec(with_spec(**keyed, source={"files": {"path": "/in"}})).spec.keyed


def test_maintenance_is_on_by_default_for_every_sync() -> None:
    """A spec without a maintenance section compacts, rewrites deletes, expires snapshots and removes orphans."""
    for document in (VALID, cdc_spec({"key": ["id"]}, changes={"format": "debezium"})):
        maintenance = parse_spec(document).spec.maintenance
        compaction, rewrite = maintenance.compaction, maintenance.rewrite_deletes
        expire, orphans = maintenance.expire_snapshots, maintenance.remove_orphans
        assert compaction.enabled and rewrite.enabled and expire.enabled and orphans.enabled
        assert (compaction.small_file_percent, compaction.min_input_files) == (75, 5)
        assert (rewrite.min_delete_files, rewrite.deleted_rows_percent) == (1, 20)
        assert (expire.older_than_seconds, expire.retain_last, expire.every_seconds, expire.max_snapshots) == (3600, 10, 600, 100)
        assert (orphans.older_than_seconds, orphans.every_seconds) == (3600, 3600)
        assert (maintenance.max_rewrite_bytes, maintenance.max_files_per_run) == (1024**3, 1000)
    assert parse_spec(with_spec(maintenance={})).spec.maintenance == parse_spec(VALID).spec.maintenance


def test_each_part_of_maintenance_turns_off_on_its_own() -> None:
    parts = ("compaction", "rewriteDeletes", "expireSnapshots", "removeOrphans")
    for part in parts:
        maintenance = parse_spec(with_spec(maintenance={part: {"enabled": False}})).spec.maintenance
        enabled = {name: getattr(maintenance, field).enabled for name, field in zip(
            parts, ("compaction", "rewrite_deletes", "expire_snapshots", "remove_orphans"), strict=True)}
        assert enabled == {name: name != part for name in parts}, part


def test_rewrite_deletes_spacing_is_an_upper_bound_on_how_often() -> None:
    rewrite = parse_spec(with_spec()).spec.maintenance.rewrite_deletes
    assert rewrite.allowed(0, 0)  # no spacing: the table's state alone decides
    counted = parse_spec(with_spec(maintenance={"rewriteDeletes": {"afterCommits": 3}})).spec.maintenance
    assert not counted.rewrite_deletes.allowed(2, 1e9) and counted.rewrite_deletes.allowed(3, 0)
    timed = parse_spec(with_spec(maintenance={"rewriteDeletes": {"every": "10m"}})).spec.maintenance
    assert not timed.rewrite_deletes.allowed(1000, 599) and timed.rewrite_deletes.allowed(0, 600)
    assert parse_spec(with_spec(maintenance={"expireSnapshots": {"olderThan": "0s", "retainLast": 1}})).spec.maintenance


def test_maintenance_problems_are_refused_at_their_path() -> None:
    from icebergsync.spec import REWRITE_EVERY_OR_AFTER_COMMITS_MESSAGE

    keyed = {"key": ["id"]}
    assert problems_of(cdc_spec(keyed, changes={"format": "debezium"},
                                maintenance={"rewriteDeletes": {"every": "1m", "afterCommits": 2}})) == [
        f"spec.maintenance.rewriteDeletes: {REWRITE_EVERY_OR_AFTER_COMMITS_MESSAGE}"]
    assert problems_of(cdc_spec(keyed, changes={"format": "debezium"}, maintenance={"rewriteDeletes": {"every": "0s"}})) \
        == ["spec.maintenance.rewriteDeletes: every must be a duration greater than zero (e.g. 500ms, 30s, 5m or 1h30m)"]
    for bad, path in [({"rewriteDeletes": {"afterCommits": 0}}, "spec.maintenance.rewriteDeletes.afterCommits"),
                      ({"rewriteDeletes": {"minDeleteFiles": 0}}, "spec.maintenance.rewriteDeletes.minDeleteFiles"),
                      ({"rewriteDeletes": {"deletedRowsPercent": 101}},
                       "spec.maintenance.rewriteDeletes.deletedRowsPercent"),
                      ({"compaction": {"smallFilePercent": 0}}, "spec.maintenance.compaction.smallFilePercent"),
                      ({"compaction": {"minInputFiles": 1}}, "spec.maintenance.compaction.minInputFiles"),
                      ({"compaction": {"enabled": "sometimes"}}, "spec.maintenance.compaction.enabled"),
                      ({"maxFilesPerRun": 0}, "spec.maintenance.maxFilesPerRun"),
                      ({"maxBytesPerRun": "lots"}, "spec.maintenance.maxBytesPerRun"),
                      ({"removeOrphans": {"olderThan": "later"}}, "spec.maintenance.removeOrphans.olderThan"),
                      ({"expireSnapshots": {"retainLast": 0}}, "spec.maintenance.expireSnapshots.retainLast"),
                      ({"expireSnapshots": {"olderThan": "soon"}}, "spec.maintenance.expireSnapshots.olderThan"),
                      ({"vacuum": {}}, "spec.maintenance.vacuum")]:
        assert any(p.startswith(path) for p in problems_of(cdc_spec(keyed, changes={"format": "debezium"},
                                                                    maintenance=bad))), bad
    assert problems_of(with_spec(maintenance={"maxBytesPerRun": "0Mi"})) == [
        "spec.maintenance: maxBytesPerRun must be greater than zero"]
    assert problems_of(with_spec(maintenance={"removeOrphans": {"every": "0s"}})) == [
        "spec.maintenance.removeOrphans: every must be a duration greater than zero (e.g. 500ms, 30s, 5m or 1h30m)"]
    assert problems_of(with_spec(maintenance={"expireSnapshots": {"every": "0ms"}})) == [
        "spec.maintenance.expireSnapshots: every must be a duration greater than zero (e.g. 500ms, 30s, 5m or 1h30m)"]


def test_array_columns_of_primitives_and_where_they_are_refused() -> None:
    schema = [{"name": "id", "type": "long", "required": True}, {"name": "tags", "type": "array<string>", "required": True},
              {"name": "prices", "type": "array<decimal(8, 2)>"}, {"name": "days", "type": "array< date >"}]
    spec = parse_spec(with_spec(source={"files": {"path": "/in"}}, schema=schema, table={"name": "a.b"})).spec
    assert [column.type for column in spec.schema_] == ["long", "array<string>", "array<decimal(8, 2)>", "array< date >"]
    for bad in ("array<>", "array<uuid>", "list<int>", "array<int", "struct<a int>", "map<array<int>, int>"):
        problems = problems_of(with_spec(source={"files": {"path": "/in"}}, table={"name": "a.b"},
                                         schema=[{"name": "x", "type": bad}]))
        assert [p.split(":")[0] for p in problems] == ["spec.schema[0].type"], (bad, problems)
    refused = problems_of(with_spec(source={"files": {"path": "/in", "format": "csv"}}, schema=schema,
                                    eventTimeColumn="days", changes={"format": "upsert"},
                                    table={"name": "a.b", "key": ["tags"], "partitionBy": ["truncate(4, tags)"]}))
    assert "spec.table.key[0]: column 'tags' is array<string>; a key column cannot be float, double, an array, a map or a struct" \
        in refused
    assert "spec.table.partitionBy[0]: column 'tags' is array<string>; an array, map or struct column cannot be a partition source" \
        in refused
    assert "spec.eventTimeColumn: column 'days' is array< date >; an event time is a date or timestamp" in refused
    assert any(p.startswith("spec.schema: array, map or struct column(s) tags, prices, days need JSON or Parquet")
               for p in refused)


def test_transactions_need_debezium_on_kafka_and_their_own_topic() -> None:
    from icebergsync.spec import TRANSACTIONS_NEED_DEBEZIUM_KAFKA_MESSAGE

    def on(source: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        document = cdc_spec({"key": ["id"]}, changes=changes)
        document["spec"]["source"] = source
        return document

    kafka = {"kafka": {"bootstrapServers": "k:9092", "topicPattern": r"db\.public\.(\w+)"}}
    aligned = {"format": "debezium", "transactions": {"topic": "db.transaction"}}
    spec = parse_spec(on(kafka, aligned)).spec
    assert spec.changes is not None and spec.changes.transactions is not None
    assert spec.changes.transactions.max_wait_seconds == 300
    assert problems_of(cdc_spec({"key": ["id"]}, changes=aligned)) == [f"spec: {TRANSACTIONS_NEED_DEBEZIUM_KAFKA_MESSAGE}"]
    upsert = {**aligned, "format": "upsert"}
    assert problems_of(on(kafka, upsert)) == [
        f"spec: {TRANSACTIONS_NEED_DEBEZIUM_KAFKA_MESSAGE}"]
    own = {"kafka": {"bootstrapServers": "k:9092", "topicPattern": r"db\..*"}}
    assert any(p.startswith("spec.changes.transactions.topic: the transaction topic is one of")
               for p in problems_of(on(own, aligned)))
    assert any(p.startswith("spec.changes.transactions") and "maxWait must be a duration greater than zero" in p for p in problems_of(
        on(kafka, {**aligned, "transactions": {"topic": "t", "maxWait": "0s"}})))


def test_only_a_sql_catalog_gets_the_local_warehouse_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sql = catalog_properties(Catalog())
    assert sql["warehouse"] == (tmp_path / ".icebergsync" / "warehouse").as_uri()
    rest = catalog_properties(Catalog(type="rest", uri="http://127.0.0.1:1/iceberg"))
    assert "warehouse" not in rest  # the server's own choice: Nessie refuses a warehouse it does not know
    given = catalog_properties(Catalog(type="rest", uri="http://127.0.0.1:1/iceberg", warehouse="s3://lake/w"))
    assert given["warehouse"] == "s3://lake/w"


def test_a_struct_field_can_be_a_partition_source_and_paths_through_arrays_or_maps_are_named() -> None:
    schema = [{"name": "id", "type": "long", "required": True},
              {"name": "event", "type": "struct<ts: timestamp, kind: string, items: array<struct<sku: string>>>"}]
    refused = problems_of(with_spec(source={"files": {"path": "/in"}}, schema=schema, table={
        "name": "a.b", "partitionBy": ["day(event.ts)", "event.kind", "bucket(4, event.items.sku)", "event.nope",
                                       "day(event.kind)", "nope.ts", "event"]}))
    assert [p for p in refused if "partitionBy" in p] == [
        "spec.table.partitionBy[2]: 'event.items' is array<struct<sku: string>>, not a struct: 'event.items.sku' "
        "names no field (a field inside an array or a map cannot be one)",
        "spec.table.partitionBy[3]: struct 'event' has no field 'nope'",
        "spec.table.partitionBy[4]: 'day(event.kind)' needs a date or timestamp column, 'event.kind' is string",
        "spec.table.partitionBy[5]: column 'nope' is not in the schema",
        "spec.table.partitionBy[6]: column 'event' is struct<ts: timestamp, kind: string, items: array<struct<sku: "
        "string>>>; an array, map or struct column cannot be a partition source"]
