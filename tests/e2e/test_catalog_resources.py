"""Catalog resources on the real API server with the real operator: a sync naming an IcebergCatalog
renders and runs (the job mounts only the catalog's Secret); a ClusterIcebergCatalog serves only its
namespaces and never hands its own Secret to a job; inline catalogs are refused by default; a missing
catalog is a clear condition until it appears; each catalog's Ready condition follows a connection check."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import yaml
from kubernetes import client

from tests.e2e.conftest import GROUP, VERSION, Kube, OperatorProcess, mounted_spec_configmap, wait_for
from tests.e2e.spark_operator_standin import SparkOperatorStandIn
from tests.e2e.test_operator import _table_ids

StartOperator = Callable[..., OperatorProcess]
StartSpark = Callable[..., SparkOperatorStandIn]
CLOSED = "--no-allow-inline-catalogs"  # the operator's (and the chart's) default, overriding the fixture's


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ref_spec(name: str, kind: str = "IcebergCatalog", **table: Any) -> dict[str, Any]:
    return {"source": {"generator": {"rowsPerSecond": 5000, "totalRows": 2000}},
            "table": {"name": "db.trips", "catalogRef": {"kind": kind, "name": name}, **table},
            "commit": {"interval": "1s"}}


def create_catalog(kube: Kube, name: str, spec: dict[str, Any]) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "IcebergCatalog", "metadata": {"name": name}, "spec": spec}
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, kube.namespace, "icebergcatalogs", body)


def create_secret(kube: Kube, name: str, data: dict[str, str]) -> None:
    kube.core.create_namespaced_secret(kube.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=name), string_data=data))


def ready(get: Callable[[], dict[str, Any]]) -> tuple[str, str, str] | None:
    found = [c for c in (get().get("status") or {}).get("conditions", []) if c["type"] == "Ready"]
    return (found[0]["status"], found[0]["reason"], found[0]["message"]) if found else None


def catalog_ready(kube: Kube, name: str) -> tuple[str, str, str] | None:
    return ready(lambda: kube.custom.get_namespaced_custom_object(GROUP, VERSION, kube.namespace, "icebergcatalogs",
                                                                  name))


def stalled_with(kube: Kube, name: str, reason: str) -> dict[str, Any]:
    return kube.wait_status(name, f"Stalled {reason}", lambda s: any(
        c["type"] == "Stalled" and c["status"] == "True" and c["reason"] == reason for c in s.get("conditions", [])))


def test_a_sync_naming_an_icebergcatalog_renders_and_runs_with_only_the_catalogs_secret(
        kube: Kube, start_operator: StartOperator, spark_operator_standin: StartSpark,
        warehouse: dict[str, str]) -> None:
    create_secret(kube, "lake-props", {"echo": "false"})
    create_secret(kube, "unrelated", {"token": "never-mounted"})
    create_catalog(kube, "lake", {"type": "sql", **warehouse, "secretRef": {"name": "lake-props"}})
    standin = spark_operator_standin()
    kube.create_sync("trips", ref_spec("lake"))
    start_operator(CLOSED)

    assert wait_for("catalog Ready", lambda: (lambda r: r if r and r[0] == "True" else None)(
        catalog_ready(kube, "lake")))[1] == "Connected"
    status = kube.wait_status("trips", "completed", lambda s: s.get("phase") == "Completed", timeout=240)
    assert standin.exit_code("trips-v1") == 0, standin.driver_log("trips-v1")[-3000:]
    assert json.loads(status["lastCommit"]["frontier"]) == {"next_id": 2000}
    assert _table_ids(warehouse) == list(range(2000))
    application = kube.applications()["trips-v1"]
    mounted = {secret["name"] for pod in ("driver", "executor") for secret in application["spec"][pod]["secrets"]}
    assert mounted == {"lake-props"}
    job = yaml.safe_load(kube.configmaps()[mounted_spec_configmap(application)].data["sync.yaml"])
    assert "catalogRef" not in job["spec"]["table"]
    assert job["spec"]["table"]["catalog"] == {"type": "sql", **warehouse, "name": "icebergsync", "properties": {},
                                               "secretRef": {"name": "lake-props"}}
    # The stored sync still names the catalog resource: only the job's copy is resolved.
    assert (kube.get_sync("trips") or {})["spec"]["table"]["catalogRef"] == {"kind": "IcebergCatalog", "name": "lake"}


def test_a_cluster_catalog_serves_its_namespaces_only_and_never_hands_out_its_own_secret(
        kube: Kube, other_kube: Kube, start_operator: StartOperator, cluster_catalogs: Callable[..., str],
        warehouse: dict[str, str]) -> None:
    create_secret(kube, "admin-creds", {"echo": "false"})  # kube's namespace doubles as the catalog-secrets one
    create_secret(kube, "lake-job", {"echo": "false"})
    name = cluster_catalogs({"type": "sql", **warehouse, "namespaces": [kube.namespace],
                             "secretRef": {"name": "admin-creds"}, "jobSecretRef": {"name": "lake-job"}})
    kube.create_sync("served", ref_spec(name, "ClusterIcebergCatalog"))
    other_kube.create_sync("foreign", ref_spec(name, "ClusterIcebergCatalog"))
    start_operator(CLOSED, "--catalog-secrets-namespace", kube.namespace, watch=(other_kube.namespace,))

    refused = stalled_with(other_kube, "foreign", "CatalogNotServed")
    message = next(c["message"] for c in refused["conditions"] if c["type"] == "Stalled")
    assert f"does not serve namespace {other_kube.namespace}" in message
    assert other_kube.event_reasons("foreign") == ["CatalogNotServed"]
    assert other_kube.applications() == {}
    application = kube.wait_applications({"served-v1"})["served-v1"]
    mounted = {secret["name"] for pod in ("driver", "executor") for secret in application["spec"][pod]["secrets"]}
    assert mounted == {"lake-job"}
    assert wait_for("cluster catalog Ready", lambda: ready(lambda: kube.custom.get_cluster_custom_object(
        GROUP, VERSION, "clustericebergcatalogs", name)))[:2] == ("True", "Connected")


def test_an_inline_catalog_is_refused_by_default(kube: Kube, start_operator: StartOperator,
                                                 warehouse: dict[str, str]) -> None:
    kube.create_sync("inline", {"source": {"generator": {"totalRows": 10}},
                                "table": {"name": "db.trips", "catalog": {"type": "sql", **warehouse}}})
    kube.create_sync("unnamed", {"source": {"generator": {"totalRows": 10}}, "table": {"name": "db.trips"}})
    operator = start_operator(CLOSED)
    for name in ("inline", "unnamed"):
        status = stalled_with(kube, name, "InlineCatalogRefused")
        assert "spec.table.catalogRef" in next(c["message"] for c in status["conditions"] if c["type"] == "Stalled")
    operator.wait_reconciles(4)
    assert kube.event_reasons("inline") == ["InlineCatalogRefused"]
    assert kube.applications() == {}


def test_a_missing_catalog_is_a_clear_condition_until_it_is_created(
        kube: Kube, start_operator: StartOperator, warehouse: dict[str, str]) -> None:
    kube.create_sync("trips", ref_spec("lake"))
    start_operator(CLOSED)
    status = stalled_with(kube, "trips", "CatalogNotFound")
    assert (next(c["message"] for c in status["conditions"] if c["type"] == "Stalled")
            == f"spec.table.catalogRef: IcebergCatalog 'lake' in namespace {kube.namespace} does not exist")
    assert kube.applications() == {}
    create_catalog(kube, "lake", {"type": "sql", **warehouse})
    kube.wait_applications({"trips-v1"})
    assert kube.event_reasons("trips") == ["CatalogNotFound", "Launched"]


def test_ready_follows_the_connection_check(kube: Kube, start_operator: StartOperator,
                                           warehouse: dict[str, str]) -> None:
    create_catalog(kube, "up", {"type": "sql", **warehouse})
    down_uri = f"http://127.0.0.1:{closed_port()}/"
    create_catalog(kube, "down", {"type": "rest", "uri": down_uri})
    start_operator(CLOSED, "--allowed-catalog-uris", down_uri)
    assert wait_for("up Ready", lambda: catalog_ready(kube, "up"))[:2] == ("True", "Connected")
    down = wait_for("down not Ready", lambda: catalog_ready(kube, "down"))
    assert down[:2] == ("False", "Unreachable") and "cannot connect" in down[2]
    assert kube.event_reasons("down") == ["Unreachable"]
    assert kube.event_reasons("up") == ["Connected"]
