"""The Secrets a job mounts, on the real API server with the real operator: a sync naming a
service-account token or a registry credential (in any field, or through its catalog resource) is
refused with ``SecretRefused`` naming the field and the type, and nothing is launched; an Opaque
Secret launches; a Secret that does not exist yet is waited for, then launched with."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.e2e.conftest import Kube
from tests.e2e.test_catalog_resources import create_catalog, ref_spec
from tests.e2e.test_closed_defaults import stalled_message
from tests.e2e.test_operator import Lake, StartOperator, generator_spec

TOKEN = "kubernetes.io/service-account-token"
REGISTRY = "kubernetes.io/dockerconfigjson"
BASIC_AUTH = "kubernetes.io/basic-auth"


def create_secret(kube: Kube, name: str, type_: str = "Opaque", **metadata: Any) -> None:
    data = {REGISTRY: {".dockerconfigjson": "{}"}, BASIC_AUTH: {"username": "u", "password": "p"}}.get(type_, {"k": "v"})
    kube.core.create_namespaced_secret(kube.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, **metadata), type=type_, string_data=data))


def source_spec(lake: Lake, source: str, secret: str) -> dict[str, Any]:
    """A files or kafka sync whose source names ``secret``."""
    settings = {"files": {"path": "/in", "format": "json"}, "kafka": {"bootstrapServers": "kafka:9092", "topic": "t"}}
    return {"source": {source: {**settings[source], "secretRef": {"name": secret}}},
            "schema": [{"name": "id", "type": "long"}], "table": {"name": "db.trips", "catalog": lake}}


def test_a_job_never_mounts_a_token_or_registry_secret(kube: Kube, start_operator: StartOperator,
                                                       warehouse: Lake) -> None:
    create_secret(kube, "token", TOKEN, annotations={"kubernetes.io/service-account.name": "default"})
    create_secret(kube, "registry", REGISTRY)
    create_secret(kube, "creds")
    create_catalog(kube, "lake", {"type": "sql", **warehouse, "secretRef": {"name": "token"}})
    cases = {
        "files": (source_spec(warehouse, "files", "token"), f"spec.source.files.secretRef: Secret 'token' is of type {TOKEN}"),
        "kafka": (source_spec(warehouse, "kafka", "registry"),
                  f"spec.source.kafka.secretRef: Secret 'registry' is of type {REGISTRY}"),
        "catalog": (generator_spec({**warehouse, "secretRef": {"name": "registry"}}),
                    f"spec.table.catalog.secretRef: Secret 'registry' is of type {REGISTRY}"),
        "catalog-ref": (ref_spec("lake"),
                        f"spec.table.catalogRef (IcebergCatalog 'lake', spec.secretRef): Secret 'token' is of type {TOKEN}"),
    }
    for name, (spec, _) in cases.items():
        kube.create_sync(name, spec)
    kube.create_sync("opaque", source_spec({**warehouse, "secretRef": {"name": "creds"}}, "files", "creds"))
    operator = start_operator()

    kube.wait_applications({"opaque-v1"})
    for name, (_, text) in cases.items():
        assert text in stalled_message(kube, name, "SecretRefused"), name
    operator.wait_reconciles(2 * len(cases))
    for name in cases:
        assert kube.event_reasons(name) == ["SecretRefused"], name
    assert set(kube.applications()) == {"opaque-v1"}
    opaque = kube.applications()["opaque-v1"]["spec"]["driver"]["secrets"]
    assert [secret["name"] for secret in opaque] == ["creds"]


def test_a_missing_secret_is_waited_for_then_launched_with(kube: Kube, start_operator: StartOperator,
                                                            warehouse: Lake) -> None:
    kube.create_sync("later", source_spec(warehouse, "kafka", "later"))
    operator = start_operator()
    kube.wait_status("later", "waiting for its Secret", lambda s: any(
        c["type"] == "Reconciling" and c["reason"] == "WaitingForSecret" for c in s.get("conditions", [])))
    operator.wait_reconciles(3)
    assert kube.applications() == {}
    assert kube.event_reasons("later") == ["WaitingForSecret"]
    create_secret(kube, "later", BASIC_AUTH)
    kube.wait_applications({"later-v1"})
