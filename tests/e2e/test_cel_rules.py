"""The CRD's CEL rules and the pydantic model agree: the same specs, valid and invalid, get the same
verdict from the real API server (server-side dry run of the generated CRD) and from
``icebergsync.spec.parse_spec``, and a spec the API server refuses by a CEL rule is refused by the
model with the same message (the model may name fewer rules: it stops at the first broken object)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from icebergsync.cel_rules import CEL_RULES
from icebergsync.errors import SpecError
from icebergsync.spec import parse_spec, positive_duration_message
from tests.e2e.conftest import GROUP, PLURAL, VERSION, Kube

CEL_MESSAGES = [rule["message"] for rules in CEL_RULES.values() for rule in rules]
SCHEMA = [{"name": "id", "type": "long"}]
KEYED_SCHEMA = [{"name": "id", "type": "long", "required": True}]
FILES = {"files": {"path": "/data"}}
KAFKA = {"kafka": {"bootstrapServers": "k:9092", "topic": "t"}}
KEYED = {"source": FILES, "schema": KEYED_SCHEMA, "table": {"name": "db.trips", "key": ["id"]},
         "changes": {"format": "debezium"}}

# Spec fields over a valid generator spec, each near a CEL rule: on both sides of it.
CASES: dict[str, dict[str, Any]] = {
    "generator alone": {},
    "no source": {"source": {}},
    "two sources": {"source": {"generator": {}, **FILES}, "schema": SCHEMA},
    "files with a schema": {"source": FILES, "schema": SCHEMA},
    "kafka with a schema": {"source": KAFKA, "schema": SCHEMA},
    "files without a schema": {"source": FILES},
    "files with an empty schema": {"source": FILES, "schema": []},
    "kafka without a schema": {"source": KAFKA},
    "dead letters into the table itself": {"deadLetter": {"table": "db.trips"}},
    "dead letters into another table": {"deadLetter": {"table": "db.trips_dead"}},
    "bucket of width 0": {"table": {"name": "db.trips", "partitionBy": ["bucket(0, id)"]}},
    "truncate of width 000 with spaces": {"table": {"name": "db.trips", "partitionBy": [" truncate( 000 , vendor)"]}},
    "bucket of width 16": {"table": {"name": "db.trips", "partitionBy": ["bucket(16, id)", "truncate(4, vendor)"]}},
    "interval 0s": {"commit": {"interval": "0s"}},
    "interval 0m0ms": {"commit": {"interval": "0m0ms"}},
    "interval 0.5s": {"commit": {"interval": "0.5s"}},
    "interval 1h30m": {"commit": {"interval": "1h30m"}},
    "a column of an unknown type": {"source": FILES, "schema": [{"name": "id", "type": "integer"}]},
    "columns of every kind of type": {"source": FILES, "schema": [
        {"name": "a", "type": "long"}, {"name": "b", "type": "decimal( 10 , 2 )"}, {"name": "c", "type": "array<string>"},
        {"name": "d", "type": "array< decimal(8,2) >"}, {"name": "e", "type": "timestamptz"},
        {"name": "f", "type": "struct<id: long not null, items: array<struct<sku: string>>, m: map<string, int>>"}]},
    "a column of a type shaped like none": {"source": FILES, "schema": [{"name": "f", "type": "structure<a: int>"}]},
    "poll interval 0ms": {"commit": {"pollInterval": "0ms"}},
    "poll interval 250ms": {"commit": {"pollInterval": "250ms"}},
    "target file size 1023": {"commit": {"targetFileSize": "1023"}},
    "target file size 1023B": {"commit": {"targetFileSize": "1023B"}},
    "target file size 1K": {"commit": {"targetFileSize": "1K"}},
    "target file size 0.0009Mi": {"commit": {"targetFileSize": "0.0009Mi"}},
    "target file size 1024": {"commit": {"targetFileSize": "1024"}},
    "target file size 1Ki": {"commit": {"targetFileSize": "1Ki"}},
    "target file size 1.5K": {"commit": {"targetFileSize": "1.5K"}},
    "target file size 512Mi": {"commit": {"targetFileSize": "512Mi"}},
    "changes with a key": {"source": FILES, "schema": KEYED_SCHEMA, "table": {"name": "db.trips", "key": ["id"]},
                           "changes": {"format": "debezium"}},
    "changes without a key": {"source": FILES, "schema": KEYED_SCHEMA, "changes": {"format": "upsert"}},
    "changes without a schema, following the records'": {**KEYED, "schema": []},
    "changes without a schema, evolution off": {**KEYED, "schema": [], "schemaEvolution": "none"},
    "changes without a schema, evolution on": {**KEYED, "schemaEvolution": "evolve"},
    "a key without changes": {"source": FILES, "schema": KEYED_SCHEMA, "table": {"name": "db.trips", "key": ["id"]}},
    "changes from the generator": {"table": {"name": "db.trips", "key": ["id"]}, "changes": {"format": "upsert"}},
    "rewriteDeletes of a keyed sync": {**KEYED, "maintenance": {"rewriteDeletes": {"afterCommits": 5}}},
    "rewriteDeletes every 10m": {**KEYED, "maintenance": {"rewriteDeletes": {"every": "10m", "minDeleteFiles": 4}}},
    "rewriteDeletes without changes": {"maintenance": {"rewriteDeletes": {}}},
    "equality deletes": {**KEYED, "changes": {"format": "debezium", "deletes": "equality"}},
    "rewriteDeletes every and afterCommits": {**KEYED, "maintenance": {"rewriteDeletes": {"every": "1m",
                                                                                           "afterCommits": 3}}},
    "rewriteDeletes every 0s": {**KEYED, "maintenance": {"rewriteDeletes": {"every": "0s"}}},
    "expireSnapshots defaults": {"maintenance": {"expireSnapshots": {}}},
    "expireSnapshots older than 0s": {"maintenance": {"expireSnapshots": {"olderThan": "0s", "retainLast": 1}}},
    "expireSnapshots every 0ms": {"maintenance": {"expireSnapshots": {"every": "0ms"}}},
    "maintenance parts off": {"maintenance": {"compaction": {"enabled": False}, "rewriteDeletes": {"enabled": False},
                                              "expireSnapshots": {"enabled": False},
                                              "removeOrphans": {"enabled": False}}},
    "compaction tuned": {"maintenance": {"compaction": {"smallFilePercent": 50, "minInputFiles": 2},
                                         "maxBytesPerRun": "256Mi", "maxFilesPerRun": 50}},
    "maxBytesPerRun 0Mi": {"maintenance": {"maxBytesPerRun": "0Mi"}},
    "removeOrphans every 0s": {"maintenance": {"removeOrphans": {"every": "0s"}}},
    "removeOrphans older than 0s": {"maintenance": {"removeOrphans": {"olderThan": "0s"}}},
    "transactions of debezium on kafka": {**KEYED, "source": KAFKA, "changes": {
        "format": "debezium", "transactions": {"topic": "db.transaction", "maxWait": "1m"}}},
    "transactions on files": {**KEYED, "changes": {"format": "debezium", "transactions": {"topic": "db.transaction"}}},
    "transactions of upserts": {**KEYED, "source": KAFKA, "changes": {"format": "upsert",
                                                                      "transactions": {"topic": "db.transaction"}}},
    "transactions maxWait 0s": {**KEYED, "source": KAFKA, "changes": {
        "format": "debezium", "transactions": {"topic": "db.transaction", "maxWait": "0s"}}},
    "a table per topic": {"source": KAFKA, "schema": SCHEMA, "table": {"name": "db.{topic}"}},
    "a table per directory of files": {"source": FILES, "schema": SCHEMA, "table": {"name": "db.{topic}"}},
    "a table per generator": {"table": {"name": "db.{topic}"}},
    "a dead-letter table per topic": {"source": KAFKA, "schema": SCHEMA, "table": {"name": "db.{topic}"},
                                      "deadLetter": {"table": "db.{topic}_dead"}},
    "one dead-letter table for a table per topic": {"source": KAFKA, "schema": SCHEMA, "table": {"name": "db.{topic}"},
                                                    "deadLetter": {"table": "db.dead"}},
    "per-table settings of a table per topic": {"source": KAFKA, "schema": SCHEMA, "table": {"name": "db.{topic}"},
                                                "tables": {"db.orders": {"properties": {"comment": "orders"}}}},
    "per-table settings of one table": {"tables": {"db.trips": {"properties": {"comment": "trips"}}}},
    "per-table settings by a bad name": {"source": KAFKA, "schema": SCHEMA, "table": {"name": "db.{topic}"},
                                         "tables": {"orders": {}}},
    "a catalog resource": {"table": {"name": "db.trips", "catalogRef": {"name": "lake"}}},
    "an inline catalog": {"table": {"name": "db.trips", "catalog": {"type": "rest", "uri": "http://c/"}}},
    "an inline catalog and a catalog resource": {"table": {"name": "db.trips", "catalog": {"uri": "sqlite:///x.db"},
                                                           "catalogRef": {"name": "lake"}}},
}


def document(overrides: dict[str, Any]) -> dict[str, Any]:
    spec = {"source": {"generator": {"totalRows": 10}}, "table": {"name": "db.trips"}, **overrides}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "IcebergSync", "metadata": {"name": "cel"}, "spec": spec}


def api_server_verdict(kube: Kube, body: dict[str, Any]) -> str | None:
    """None when the API server accepts the resource, else its message (nothing is stored: dry run)."""
    try:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, kube.namespace, PLURAL, body, dry_run="All",
                                                    field_validation="Strict")
    except client.ApiException as error:
        assert error.status == 422, error.body
        return str(json.loads(error.body)["message"])
    return None


def model_verdict(body: dict[str, Any]) -> str | None:
    """None when the model accepts the document, else its problems."""
    try:
        parse_spec(body)
    except SpecError as error:
        return str(error)
    return None


@pytest.mark.parametrize("name", list(CASES))
def test_the_api_server_and_the_model_agree(kube: Kube, name: str) -> None:
    body = document(CASES[name])
    server, model = api_server_verdict(kube, body), model_verdict(body)
    assert (server is None) == (model is None), f"API server: {server!r}; model: {model!r}"
    if server is not None and model is not None:
        refused_by = [message for message in CEL_MESSAGES if message in server]
        assert refused_by, f"not refused by a CEL rule: {server}"
        # The model stops at the first broken object, so it may name fewer of the rules than the API server.
        assert any(message in model for message in refused_by), f"API server: {server!r}; model: {model!r}"


def test_a_value_that_is_no_duration_gets_the_rules_message_not_a_conversion_error(kube: Kube) -> None:
    body = document({"commit": {"interval": "2 seconds"}})
    server = api_server_verdict(kube, body)
    assert server is not None and positive_duration_message("interval") in server, server
    assert "conversion" not in server and "no such overload" not in server, server
    model = model_verdict(body)
    assert model is not None and "spec.commit.interval: must be a duration, e.g. 500ms" in model


def test_every_spec_rule_is_exercised() -> None:
    bodies = [document(overrides) for overrides in CASES.values()]
    refused = {message for body in bodies if (problems := model_verdict(body)) for message in CEL_MESSAGES
               if message in problems}
    spec_messages = {rule["message"] for path, rules in CEL_RULES.items() if path.startswith("spec") for rule in rules}
    assert refused == spec_messages
