"""docs/configuration.md is the generated reference of the CRD, and every example is a valid spec.

The examples are also created (server-side dry run, strict field validation) against the real API
server with the real CRD in tests/e2e/test_helm.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from icebergsync import crd, docs_reference, generate
from icebergsync.catalogs.crd import build_catalog_crd
from icebergsync.catalogs.model import IcebergCatalogSpec
from icebergsync.spec import KIND, load_spec

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO_ROOT / "examples").glob("**/*.yaml"))


def test_configuration_reference_is_generated_from_the_crd() -> None:
    committed = (REPO_ROOT / "docs" / "configuration.md").read_text()
    assert committed == docs_reference.render_reference(), (
        "docs/configuration.md is stale: run .venv/bin/python -m icebergsync.generate --write")


def test_reference_lists_every_schema_field() -> None:
    text = docs_reference.render_reference()
    schema = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for top in ("spec", "status"):
        for path, _, _ in docs_reference._fields(schema["properties"][top], top):
            assert f"| `{path}` |" in text, path
    assert "exactly one of generator, files, kafka must be set" in text


def test_generate_writes_every_generated_file(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "crds").mkdir()
    (tmp_path / "charts" / "icebergsync" / "crds").mkdir(parents=True)
    assert generate.main(["--write", str(tmp_path)]) == 0
    for relative in generate.GENERATED_CRD_PATHS:
        assert (tmp_path / relative).read_text() == crd.render_crd_yaml()
    assert (tmp_path / generate.GENERATED_REFERENCE_PATH).read_text() == docs_reference.render_reference()
    for relative, text in generate.generated_files().items():
        assert (tmp_path / relative).read_text() == text
        assert (REPO_ROOT / relative).read_text() == text, f"{relative} is stale: run python -m icebergsync.generate --write"


# ------------------------------------------------------------------------------------------------
# examples
# ------------------------------------------------------------------------------------------------


def validate(node: Any, schema: dict[str, Any], path: str) -> list[str]:
    """The openAPI v3 subset a structural CRD schema uses (CEL rules are checked by the API server)."""
    problems: list[str] = []
    if schema.get("x-kubernetes-preserve-unknown-fields") and "type" not in schema:
        return problems
    kind = schema.get("type")
    expected = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}
    if (kind and not isinstance(node, expected[kind])) or (kind in ("integer", "number") and isinstance(node, bool)):
        return [f"{path}: expected {kind}, got {type(node).__name__}"]
    if "enum" in schema and node not in schema["enum"]:
        problems.append(f"{path}: {node!r} not in {schema['enum']}")
    if "pattern" in schema and not re.search(schema["pattern"], node):
        problems.append(f"{path}: {node!r} does not match {schema['pattern']}")
    if "minimum" in schema and node < schema["minimum"]:
        problems.append(f"{path}: {node} < {schema['minimum']}")
    if "minLength" in schema and len(node) < schema["minLength"]:
        problems.append(f"{path}: shorter than {schema['minLength']}")
    if kind == "object":
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in node:
                problems.append(f"{path}.{name}: required")
        for name, value in node.items():
            if name in properties:
                problems += validate(value, properties[name], f"{path}.{name}")
            elif isinstance(schema.get("additionalProperties"), dict):
                problems += validate(value, schema["additionalProperties"], f"{path}.{name}")
            else:
                problems.append(f"{path}.{name}: unknown field")
    if kind == "array":
        for index, item in enumerate(node):
            problems += validate(item, schema.get("items", {}), f"{path}[{index}]")
    return problems


def test_there_are_kubernetes_examples() -> None:
    names = {path.name for path in EXAMPLES}
    assert "postgres-debezium" in {path.parent.name for path in EXAMPLES}
    assert {"quickstart.yaml", "kafka-rest-s3.yaml", "files-s3.yaml", "generator-rest-s3.yaml"} <= names


def test_there_are_change_data_capture_examples_for_both_formats_and_sources() -> None:
    """Ready specs for keyed syncs, Debezium and upsert, from Kafka and from files."""
    keyed = {path.name: load_spec(path).spec for path in EXAMPLES if load_spec(path).spec.changes is not None}
    assert {"cdc-debezium-kafka.yaml", "cdc-upsert-files.yaml"} <= set(keyed)
    assert {spec.changes.format for spec in keyed.values() if spec.changes} == {"debezium", "upsert"}
    assert {spec.source.kind for spec in keyed.values()} == {"kafka", "files"}
    for name, spec in keyed.items():
        assert spec.table.key, name
        assert spec.dead_letter is not None, f"{name}: a keyed example keeps its bad records"


def test_the_postgres_debezium_example_has_the_connector_settings_the_docs_require() -> None:
    """The connector's settings are those docs/connectors.md maps types under, and the sync reads its topic."""
    directory = REPO_ROOT / "examples" / "postgres-debezium"
    config = json.loads((directory / "debezium-connector.json").read_text())["config"]
    assert {key: config[key] for key in ("value.converter.schemas.enable", "decimal.handling.mode",
                                         "time.precision.mode", "binary.handling.mode", "plugin.name")} == {
        "value.converter.schemas.enable": "true", "decimal.handling.mode": "precise",
        "time.precision.mode": "adaptive_time_microseconds", "binary.handling.mode": "bytes", "plugin.name": "pgoutput"}
    assert "unavailable.value.placeholder" not in config
    spec = load_spec(directory / "icebergsync.yaml").spec
    assert spec.changes is not None and spec.changes.format == "debezium" and spec.table.key == ["id"]
    assert spec.source.kafka is not None and spec.source.kafka.topic == f"{config['topic.prefix']}.{config['table.include.list']}"
    # Primary-key updates keep unchanged TOASTed values when a trigger never splits a source transaction.
    assert config["provide.transaction.metadata"] == "true"
    assert config["skipped.operations"] == "none"  # TRUNCATE reaches the sync (docs/connectors.md, "Truncates")
    assert spec.changes.transactions is not None and spec.changes.transactions.topic == f"{config['topic.prefix']}.transaction"
    docs = (REPO_ROOT / "docs" / "connectors.md").read_text()
    for setting in ("decimal.handling.mode", "time.precision.mode", "binary.handling.mode"):
        assert setting in docs


def test_the_mariadb_debezium_example_has_the_settings_docs_mysql_mariadb_requires() -> None:
    """The connector's settings are those docs/mysql-mariadb.md maps types under, and ONE sync reads every
    table's topic of the captured database, without spec.schema (tests/integration/test_mariadb_cdc.py runs it)."""
    directory = REPO_ROOT / "examples" / "mariadb-debezium"
    config = json.loads((directory / "debezium-connector.json").read_text())["config"]
    required = {"connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
                "value.converter.schemas.enable": "true", "value.converter.replace.null.with.default": "false",
                "decimal.handling.mode": "precise", "bigint.unsigned.handling.mode": "precise",
                "time.precision.mode": "adaptive_time_microseconds", "binary.handling.mode": "bytes",
                "skipped.operations": "none", "include.schema.changes": "false"}
    assert {key: config.get(key) for key in required} == required
    assert config["schema.history.internal.kafka.topic"]
    spec = load_spec(directory / "icebergsync.yaml").spec
    assert not spec.schema_
    assert spec.changes is not None and spec.changes.format == "debezium" and spec.table.name == "shop.{1}"
    kafka = spec.source.kafka
    assert kafka is not None and kafka.topic_pattern is not None
    assert re.fullmatch(kafka.topic_pattern, f"{config['topic.prefix']}.{config['database.include.list']}.orders")
    docs = (REPO_ROOT / "docs" / "mysql-mariadb.md").read_text()
    for setting in required:
        assert f"`{setting}`" in docs, setting
    assert "mysql-mariadb.md" in (REPO_ROOT / "docs" / "connectors.md").read_text()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.relative_to(REPO_ROOT / "examples").as_posix())
def test_example_is_a_valid_spec(path: Path) -> None:
    sync = load_spec(path)
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    (document,) = [doc for doc in documents if doc.get("kind") == KIND]
    schema = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert validate(document["spec"], schema, "spec") == []
    assert sync.metadata.name == document["metadata"]["name"]
    catalogs = {doc["metadata"]["name"]: doc for doc in documents if doc.get("kind") == "IcebergCatalog"}
    catalog_schema = build_catalog_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for doc in catalogs.values():
        assert validate(doc["spec"], catalog_schema, "spec") == []
    # Every secretRef names a Secret stub in the same file, so `kubectl apply -f` is self-contained.
    secrets = {doc["metadata"]["name"] for doc in documents if doc.get("kind") == "Secret"}
    catalog_refs = [IcebergCatalogSpec.model_validate(doc["spec"]).secret_ref for doc in catalogs.values()]
    refs = {ref.name for ref in (sync.spec.table.catalog.secret_ref if sync.spec.table.catalog else None,
                                 *catalog_refs,
                                 sync.spec.source.files.secret_ref if sync.spec.source.files else None,
                                 sync.spec.source.kafka.secret_ref if sync.spec.source.kafka else None) if ref}
    assert refs <= secrets, f"secretRefs without a Secret in {path.name}: {refs - secrets}"
    if path.name != "quickstart.yaml":
        # Cluster examples leave the namespace to `kubectl apply -n` and name a catalog resource of the file.
        assert "namespace" not in document["metadata"]
        ref = sync.spec.table.catalog_ref
        assert ref is not None and ref.kind == "IcebergCatalog" and ref.name in catalogs
        assert catalogs[ref.name]["spec"]["type"] == "rest"


def test_validator_rejects_what_the_api_server_would() -> None:
    schema = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    bad = {"source": {"generator": {"rowsPerSecond": 0}}, "table": {"name": "nodot", "catalog": {"type": "hive"}},
           "extra": 1}
    problems = validate(bad, schema, "spec")
    assert any(p.startswith("spec.source.generator.rowsPerSecond") for p in problems)
    assert any(p.startswith("spec.table.name") for p in problems)
    assert any(p.startswith("spec.table.catalog.type") for p in problems)
    assert "spec.extra: unknown field" in problems
