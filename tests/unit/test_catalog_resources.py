"""Catalog resources: their models and generated CRDs, a sync's catalog resolution, the Ready status (pure)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from icebergsync_operator.catalogs.resolve import (
    INLINE_REFUSED,
    INVALID,
    NOT_FOUND,
    NOT_SERVED,
    CatalogRefusal,
    inline_refusal,
    job_spec,
    resolve,
)
from icebergsync_operator.catalogs.status import next_status, transition_event
from icebergsync_operator.reconcile import decide
from icebergsync_operator.settings import OperatorSettings, parse_settings
from icebergsync_operator.status_update import FALSE, TRUE, Verdict

from icebergsync.catalog import catalog_properties
from icebergsync.catalogs import crd as catalog_crd
from icebergsync.catalogs.model import CatalogStatus, ClusterIcebergCatalogSpec, LabelSelector
from icebergsync.errors import SpecError
from icebergsync.spec import IcebergSync, parse_spec
from icebergsync.tables.cuts import ATOMIC_MULTI_TABLE_COMMIT, spec_cut_support
from tests.unit.test_crd import _walk
from tests.unit.test_operator_status_update import cond, observe, reasons, then

REPO_ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
REST = {"type": "rest", "uri": "http://catalog.lake:8181/", "warehouse": "s3://lake/wh",
        "properties": {"s3.region": "eu-west-1"}}


def sync_spec(table: dict[str, Any], namespace: str = "team-a") -> IcebergSync:
    return parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                       "metadata": {"name": "trips", "namespace": namespace},
                       "spec": {"source": {"generator": {}}, "table": {"name": "db.trips", **table}}})


def ref(kind: str = "IcebergCatalog", name: str = "lake", namespace: str = "team-a") -> IcebergSync:
    return sync_spec({"catalogRef": {"kind": kind, "name": name}}, namespace)


# --- models and CRDs ---------------------------------------------------------------------------


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    ({}, {}, True),
    ({"matchLabels": {"team": "a"}}, {"team": "a", "x": "y"}, True),
    ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold", "silver"]}]}, {"tier": "gold"}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}, {}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]}, {}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]}, {"tier": "gold"}, False),
    ({"matchExpressions": [{"key": "lake", "operator": "Exists"}]}, {"lake": ""}, True),
    ({"matchExpressions": [{"key": "lake", "operator": "DoesNotExist"}]}, {"lake": ""}, False),
])
def test_label_selector_has_kubernetes_semantics(selector: dict[str, Any], labels: dict[str, str],
                                                  expected: bool) -> None:
    assert LabelSelector.model_validate(selector).matches(labels) is expected


def test_a_cluster_catalog_serves_listed_or_selected_namespaces_only() -> None:
    listed = ClusterIcebergCatalogSpec.model_validate({**REST, "namespaces": ["team-a"]})
    assert listed.serves("team-a", {}) and not listed.serves("team-b", {"team": "b"})
    selected = ClusterIcebergCatalogSpec.model_validate({**REST, "namespaceSelector": {"matchLabels": {"lake": "on"}}})
    assert selected.serves("team-b", {"lake": "on"}) and not selected.serves("team-a", {})


@pytest.mark.parametrize("build", [catalog_crd.build_catalog_crd, catalog_crd.build_cluster_catalog_crd])
def test_catalog_crds_are_structural_described_and_carry_a_ready_column(build: Any) -> None:
    document = build()
    version = document["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    for path, node in _walk(root):
        for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "title", "$defs"):
            assert forbidden not in node, f"{path} has {forbidden}"
        assert "type" in node, f"{path} has no type"
    for section in ("spec", "status"):
        missing = [path for path, node in _walk(root["properties"][section], section)
                   if not node.get("description") and not path.endswith((".*", "[]"))]
        assert missing == []
    assert version["subresources"] == {"status": {}}
    assert root["properties"]["spec"]["required"] == ["type", "uri"]
    columns = [column["name"] for column in version["additionalPrinterColumns"]]
    assert columns[:4] == ["Type", "URI", "Ready", "Reason"] and columns[-1] == "Age"
    assert all("default" not in node for _, node in _walk(root["properties"]["status"]))


def test_cluster_catalog_crd_is_cluster_scoped_and_must_serve_some_namespace() -> None:
    namespaced, cluster = catalog_crd.build_catalog_crd()["spec"], catalog_crd.build_cluster_catalog_crd()["spec"]
    assert (namespaced["scope"], namespaced["names"]["kind"]) == ("Namespaced", "IcebergCatalog")
    assert (cluster["scope"], cluster["names"]["kind"]) == ("Cluster", "ClusterIcebergCatalog")
    spec = cluster["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    messages = {rule["message"] for _, node in _walk(spec) for rule in node.get("x-kubernetes-validations", [])}
    assert messages == {"namespaces or namespaceSelector must say which namespaces this catalog serves",
                        "In and NotIn need values; Exists and DoesNotExist take none"}
    assert {"secretRef", "jobSecretRef", "namespaces", "namespaceSelector"} <= set(spec["properties"])


def test_committed_catalog_crds_match_the_models() -> None:
    for name, text in catalog_crd.render_catalog_crds().items():
        assert (REPO_ROOT / "crds" / name).read_text() == text, "run: python -m icebergsync.generate --write"


# --- the sync's catalogRef ---------------------------------------------------------------------


def test_a_sync_names_at_most_one_catalog_and_a_local_run_needs_an_inline_one() -> None:
    with pytest.raises(SpecError, match="set at most one of catalog and catalogRef"):
        sync_spec({"catalog": REST, "catalogRef": {"name": "lake"}})
    with pytest.raises(SpecError, match="resolved by the operator"):
        _ = ref().spec.table.catalog_or_default
    assert sync_spec({}).spec.table.catalog_or_default.uri.startswith("sqlite:")


def test_inline_and_default_catalogs_are_refused_unless_allowed() -> None:
    for table in ({"catalog": REST}, {}):
        refusal = inline_refusal(sync_spec(table), allow_inline=False)
        assert refusal is not None and refusal.reason == INLINE_REFUSED and "catalogRef" in refusal.message
        assert inline_refusal(sync_spec(table), allow_inline=True) is None
    assert inline_refusal(ref(), allow_inline=False) is None


def test_a_namespaced_catalog_resolves_to_its_connection_and_its_secret() -> None:
    resolved = resolve(ref(), {"spec": {**REST, "secretRef": {"name": "lake-creds"}}}, None)
    assert isinstance(resolved, IcebergSync)
    catalog = resolved.spec.table.catalog
    assert catalog is not None and resolved.spec.table.catalog_ref is None
    assert (catalog.type, catalog.uri, catalog.warehouse) == ("rest", REST["uri"], "s3://lake/wh")
    assert catalog.properties == {"s3.region": "eu-west-1"}
    assert catalog.secret_ref is not None and catalog.secret_ref.name == "lake-creds"
    assert catalog.name == "icebergsync"
    renamed = resolve(ref(), {"spec": {**REST, "catalogName": "legacy"}}, None)
    assert isinstance(renamed, IcebergSync) and renamed.spec.table.catalog_or_default.name == "legacy"


def test_a_missing_or_invalid_catalog_is_refused_naming_it() -> None:
    missing = resolve(ref(name="nope"), None, None)
    assert missing == CatalogRefusal(NOT_FOUND, "spec.table.catalogRef: IcebergCatalog 'nope' in namespace team-a "
                                                "does not exist")
    invalid = resolve(ref(), {"spec": {"type": "hive", "uri": "x"}}, None)
    assert isinstance(invalid, CatalogRefusal) and invalid.reason == INVALID and "type" in invalid.message


def test_a_cluster_catalog_gives_the_job_only_the_namespace_secret_never_its_own() -> None:
    found = {"spec": {**REST, "namespaces": ["team-a"], "secretRef": {"name": "admin-creds"},
                      "jobSecretRef": {"name": "lake-job"}}}
    resolved = resolve(ref("ClusterIcebergCatalog"), found, None)
    assert isinstance(resolved, IcebergSync)
    assert resolved.spec.table.catalog is not None and resolved.spec.table.catalog.secret_ref is not None
    assert resolved.spec.table.catalog.secret_ref.name == "lake-job"
    without = resolve(ref("ClusterIcebergCatalog"), {"spec": {**REST, "namespaces": ["team-a"],
                                                              "secretRef": {"name": "admin-creds"}}}, None)
    assert isinstance(without, IcebergSync) and without.spec.table.catalog is not None
    assert without.spec.table.catalog.secret_ref is None


def test_a_cluster_catalog_refuses_a_namespace_it_does_not_serve() -> None:
    found = {"spec": {**REST, "namespaces": ["team-a"], "namespaceSelector": {"matchLabels": {"lake": "on"}}}}
    refused = resolve(ref("ClusterIcebergCatalog", namespace="team-b"), found, {"lake": "off"})
    assert isinstance(refused, CatalogRefusal) and refused.reason == NOT_SERVED
    assert "does not serve namespace team-b" in refused.message
    assert isinstance(resolve(ref("ClusterIcebergCatalog", namespace="team-b"), found, {"lake": "on"}), IcebergSync)
    unreadable = resolve(ref("ClusterIcebergCatalog", namespace="team-b"), found, None)
    assert isinstance(unreadable, CatalogRefusal) and "cannot be read" in unreadable.message
    assert isinstance(resolve(ref("ClusterIcebergCatalog"), found, None), IcebergSync)  # listed: no labels needed


def test_the_job_reads_the_resolved_catalog_in_place_of_the_ref() -> None:
    raw = {"source": {"generator": {}}, "table": {"name": "db.trips", "catalogRef": {"kind": "IcebergCatalog",
                                                                                      "name": "lake"}}}
    resolved = resolve(ref(), {"spec": {**REST, "secretRef": {"name": "lake-creds"}}}, None)
    assert isinstance(resolved, IcebergSync)
    spec = job_spec(raw, resolved)
    assert "catalogRef" not in spec["table"] and raw["table"]["catalogRef"]["name"] == "lake"
    assert spec["table"]["catalog"] == {**REST, "name": "icebergsync", "secretRef": {"name": "lake-creds"}}
    reparsed = parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                           "metadata": {"name": "trips", "namespace": "team-a"}, "spec": spec})
    assert reparsed.spec.table.catalog_or_default == resolved.spec.table.catalog
    inline = {"source": {"generator": {}}, "table": {"name": "db.trips", "catalog": REST}}
    assert job_spec(inline, sync_spec({"catalog": REST})) == inline


def test_a_catalog_resource_declaring_atomic_cuts_reaches_the_operators_condition_and_the_jobs_catalog() -> None:
    declared = {**REST, "properties": {**REST.get("properties", {}), ATOMIC_MULTI_TABLE_COMMIT: "true"}}
    raw = {"source": {"generator": {}}, "table": {"name": "db.trips", "catalogRef": {"kind": "IcebergCatalog",
                                                                                      "name": "lake"}}}
    resolved = resolve(ref(), {"spec": declared}, None)
    assert isinstance(resolved, IcebergSync)
    assert spec_cut_support(resolved.spec.table.catalog_or_default).reason == "RestCatalogDeclaredAtomic"  # operator
    job = parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                      "metadata": {"name": "trips", "namespace": "team-a"}, "spec": job_spec(raw, resolved)})
    assert catalog_properties(job.spec.table.catalog_or_default)[ATOMIC_MULTI_TABLE_COMMIT] == "true"  # load_catalog's
    assert not spec_cut_support(resolve(ref(), {"spec": REST}, None).spec.table.catalog_or_default).atomic  # type: ignore[union-attr]


def test_a_refused_catalog_stalls_the_sync_with_one_event_and_launches_nothing() -> None:
    settings = OperatorSettings()
    observation = observe(catalog_refusal=CatalogRefusal(NOT_FOUND, "spec.table.catalogRef: IcebergCatalog 'x' "
                                                                    "in namespace data does not exist"))
    decision = decide(observation, settings)
    assert decision.launch is None
    assert cond(decision, "Stalled") == ("True", NOT_FOUND) and cond(decision, "Ready") == ("False", NOT_FOUND)
    assert reasons(decision) == [NOT_FOUND] and "'x'" in decision.events[0].message
    assert decide(then(decision, observation), settings).events == ()
    created = decide(then(decision, observation, catalog_refusal=None), settings)
    assert created.launch is not None and created.launch.version == 1


def test_inline_catalogs_are_off_unless_the_admin_turns_them_on() -> None:
    assert parse_settings([], {})[0].allow_inline_catalogs is False
    assert parse_settings(["--allow-inline-catalogs"], {})[0].allow_inline_catalogs is True
    settings = parse_settings([], {"ICEBERGSYNC_ALLOW_INLINE_CATALOGS": "true",
                                   "ICEBERGSYNC_CATALOG_SECRETS_NAMESPACE": "icebergsync-system"})[0]
    assert settings.allow_inline_catalogs and settings.catalog_secrets_namespace == "icebergsync-system"


# --- the catalog's Ready condition -------------------------------------------------------------


def test_ready_moves_its_transition_time_only_on_a_change_and_events_only_on_a_change() -> None:
    up = Verdict(TRUE, "Connected", "ok")
    first = next_status(CatalogStatus(), up, 1, NOW)
    assert transition_event(CatalogStatus(), up) == ("Normal", "Connected", "ok")
    again = next_status(first, up, 1, NOW + timedelta(minutes=1))
    assert again.conditions[0].last_transition_time == first.conditions[0].last_transition_time
    assert again.last_checked != first.last_checked and transition_event(first, up) is None
    down = Verdict(FALSE, "Unreachable", "cannot connect to the catalog at http://x/")
    failed = next_status(again, down, 2, NOW + timedelta(minutes=2))
    assert failed.conditions[0].status == FALSE and failed.observed_generation == 2
    assert failed.conditions[0].last_transition_time != first.conditions[0].last_transition_time
    assert transition_event(again, down) == ("Warning", "Unreachable", down.message)


def test_the_connection_check_never_logs_a_catalog_password(caplog: pytest.LogCaptureFixture) -> None:
    from icebergsync_operator.catalog_access import CatalogAccessError
    from icebergsync_operator.catalogs.check import check_connection

    from icebergsync.spec import Catalog
    from tests.infra.services import free_port
    from tests.unit.test_catalog_access import reach

    uri = f"postgresql://sync:hunter2@127.0.0.1:{free_port()}/lake"  # nothing listens: the check fails and logs
    caplog.set_level(logging.DEBUG)
    with pytest.raises(CatalogAccessError) as refused:
        check_connection(Catalog(name="lake", type="sql", uri=uri), {}, reach(OperatorSettings(catalog_timeout=3.0)))
    assert "hunter2" not in str(refused.value)
    logged = [record.getMessage() for record in caplog.records]
    assert any("checking the catalog at postgresql://127.0.0.1" in message for message in logged), logged
    assert not [message for message in logged if "hunter2" in message]
