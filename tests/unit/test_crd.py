"""The generated IcebergSync CRD: committed file in sync with the model, structural, documented."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from icebergsync import crd, generate, resource_status
from icebergsync.spec import (
    COLUMN_TYPES_MESSAGE,
    SCHEMA_REQUIRED_MESSAGE,
    IcebergSyncSpec,
    positive_duration_message,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    if not isinstance(node, dict):
        return
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}.*")


def _version() -> dict[str, Any]:
    return crd.build_crd()["spec"]["versions"][0]


def _root() -> dict[str, Any]:
    return _version()["schema"]["openAPIV3Schema"]


def test_committed_crd_matches_the_model() -> None:
    committed = (REPO_ROOT / "crds" / "icebergsync.yaml").read_text()
    assert committed == crd.render_crd_yaml(), "run: python -m icebergsync.generate --write"


def test_cli_writes_the_same_yaml(tmp_path: Path) -> None:
    target = tmp_path / "crd.yaml"
    assert generate.main(["--output", str(target)]) == 0
    assert target.read_text() == crd.render_crd_yaml()


def test_names_scope_and_subresources() -> None:
    spec = crd.build_crd()["spec"]
    assert crd.build_crd()["metadata"]["name"] == "icebergsyncs.icebergsync.io"
    assert spec["group"] == "icebergsync.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "IcebergSync"
    assert spec["names"]["shortNames"] == ["isync"]
    assert spec["names"]["categories"] == ["icebergsync"]
    assert [v["name"] for v in spec["versions"]] == ["v1alpha1"]
    assert _version()["subresources"] == {"status": {}}


def test_schema_is_structural() -> None:
    for path, node in _walk(_root()):
        for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "title", "$defs"):
            assert forbidden not in node, f"{path} has {forbidden}"
        assert node.get("additionalProperties") is not False, path
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), f"{path} has no type"
        if "properties" in node:
            assert "additionalProperties" not in node, path


def test_only_the_two_shaped_kafka_topic_and_the_pods_affinities_preserve_unknown_fields() -> None:
    """The affinities are Kubernetes' own types, passed to the pod as written (the API server validates them)."""
    untyped = [path for path, node in _walk(_root()) if node.get("x-kubernetes-preserve-unknown-fields")]
    affinities = [f".spec.spark.{role}.affinity.{kind}" for role in ("driver", "executor")
                  for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity")]
    assert untyped == [".spec.source.kafka.topic", *affinities]


def test_every_spec_and_status_field_is_described() -> None:
    for section in ("spec", "status"):
        missing = [path for path, node in _walk(_root()["properties"][section], section)
                   if not node.get("description") and not path.endswith((".*", "[]"))]
        assert missing == [], f"add descriptions to FIELD_DESCRIPTIONS or the model: {missing}"


def test_spec_covers_every_model_field() -> None:
    spec = _root()["properties"]["spec"]
    assert set(spec["properties"]) == {info.alias or name for name, info in IcebergSyncSpec.model_fields.items()}
    assert spec["required"] == ["source", "table"]


def test_defaults_enums_and_patterns_come_from_the_model() -> None:
    spec = _root()["properties"]["spec"]["properties"]
    commit = spec["commit"]
    assert commit["default"] == {}
    assert commit["properties"]["interval"]["default"] == "30s"
    assert commit["properties"]["interval"]["pattern"].startswith("^(")
    assert spec["spark"]["default"] == {}
    assert spec["spark"]["properties"]["driver"]["default"] == {}
    # A catalog is named inline or by catalogRef: the API server fills in no catalog of its own.
    assert "default" not in spec["table"]["properties"]["catalog"]
    assert spec["table"]["properties"]["catalogRef"]["properties"]["kind"]["default"] == "IcebergCatalog"
    assert spec["table"]["properties"]["catalog"]["properties"]["type"]["enum"] == ["sql", "rest"]
    assert spec["source"]["properties"]["kafka"]["properties"]["format"]["enum"] == ["json", "avro", "protobuf", "jsonschema"]
    assert spec["suspend"]["default"] is False
    assert "default" not in spec["source"]
    schema = spec["schema"]
    assert schema["x-kubernetes-list-type"] == "map"
    assert schema["x-kubernetes-list-map-keys"] == ["name"]


def test_cel_rules_cover_cross_field_checks() -> None:
    spec = _root()["properties"]["spec"]
    messages = {rule["message"] for _, node in _walk(spec) for rule in node.get("x-kubernetes-validations", [])}
    assert {
        "exactly one of generator, files, kafka must be set",
        SCHEMA_REQUIRED_MESSAGE,
        "deadLetter.table must differ from table.name",
        positive_duration_message("interval"),
        COLUMN_TYPES_MESSAGE,
        "bucket and truncate need a width of at least 1",
        "set at most one of catalog and catalogRef",
    } <= messages


def test_status_schema_matches_the_status_model_and_has_no_defaults() -> None:
    status = _root()["properties"]["status"]
    assert set(status["properties"]) == {
        "phase", "sinkVersion", "application", "observedGeneration", "lastCommit", "secondsSinceLastCommit",
        "lag", "restarts", "consecutiveFailures", "nextRetryAt", "tables", "conditions",
    }
    assert status["properties"]["phase"]["enum"] == list(resource_status.PHASES)
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert conditions["items"]["properties"]["type"]["enum"] == list(resource_status.SYNC_CONDITION_TYPES)
    assert all("default" not in node for _, node in _walk(status))


def test_printer_columns() -> None:
    columns = {column["name"]: column for column in _version()["additionalPrinterColumns"]}
    assert list(columns) == ["Phase", "Version", "Ready", "Last Commit", "Lag", "Tables", "Age"]
    assert columns["Tables"]["priority"] == 1  # -o wide only: the default columns stay as they are
    assert columns["Last Commit"] == {**columns["Last Commit"], "type": "date",
                                      "jsonPath": ".status.lastCommit.committedAt"}
    assert columns["Age"]["jsonPath"] == ".metadata.creationTimestamp"


def test_yaml_is_a_single_document() -> None:
    documents = [doc for doc in yaml.safe_load_all(crd.render_crd_yaml()) if doc]
    assert len(documents) == 1
    assert documents[0] == crd.build_crd()
