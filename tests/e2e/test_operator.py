"""The operator against a real kube-apiserver: apply-time validation, rendering, upgrades,
suspend/resume, failure backoff, fencing, deletion, restarts, peering, and (with the Spark
Operator stand-in running the real job) status read from committed snapshots and an exactly-once
upgrade mid-stream."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
import yaml
from icebergsync_operator.constants import CLUSTER_SPARK_CONF
from kubernetes import client

from icebergsync.catalog import open_catalog
from icebergsync.spark_conf import QUICK_JIT_OPTIONS
from icebergsync.spec import Catalog
from tests.e2e.conftest import Kube, OperatorProcess, mounted_spec_configmap, wait_for
from tests.e2e.spark_operator_standin import SparkOperatorStandIn

FENCED = "driver container failed with ExitCode: 75, Reason: Error"
CRASHED = "driver container failed with ExitCode: 1, Reason: Error"
UNUSED_CATALOG = {"uri": "sqlite:////nonexistent/catalog.db"}
StartOperator = Callable[..., OperatorProcess]
Lake = dict[str, str]
StartSpark = Callable[..., SparkOperatorStandIn]
QUICK_JIT = {"spark.driver.extraJavaOptions": QUICK_JIT_OPTIONS, "spark.executor.extraJavaOptions": QUICK_JIT_OPTIONS}


def generator_spec(catalog: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": {"generator": {"rowsPerSecond": 1000, "totalRows": 1000}},
        "table": {"name": "db.trips", "catalog": catalog},
        "commit": {"interval": "1s"},
    }
    spec.update(overrides)
    return spec


# --- the CRD: invalid specs are rejected at apply time ------------------------------------


@pytest.mark.parametrize(("spec", "field", "message"), [
    ({"source": {"generator": {}, "files": {"path": "/data"}}, "schema": [{"name": "id", "type": "long"}]},
     "spec.source", "exactly one of generator, files, kafka"),
    ({"source": {}}, "spec.source", "exactly one of generator, files, kafka"),
    ({"table": {"name": "db.trips", "partitionBy": ["bucket(x)"]}}, "spec.table.partitionBy[0]", "should match"),
    ({"table": {"name": "db.trips", "partitionBy": ["bucket(0, id)"]}}, "spec.table.partitionBy[0]",
     "width of at least 1"),
    ({"commit": {"interval": "soon"}}, "spec.commit.interval", "should match"),
    ({"commit": {"interval": "0s"}}, "spec.commit.interval", "greater than zero"),
    ({"commit": {"targetFileSize": "big"}}, "spec.commit.targetFileSize", "should match"),
    ({"deadLetter": {"table": "db.trips"}}, "spec.deadLetter.table", "must differ from table.name"),
    ({"source": {"kafka": {"bootstrapServers": "k:9092", "topic": "t"}}}, "spec.schema",
     "schema is required"),
    ({"table": {"name": "trips"}}, "spec.table.name", "should match"),
    ({"table": {"name": "db.trips", "catalog": {"type": "hive"}}}, "spec.table.catalog.type", "Unsupported value"),
    ({"schema": [{"name": "id", "type": "long"}, {"name": "id", "type": "string"}]}, "spec.schema[1]",
     "Duplicate value"),
    ({"spark": {"executor": {"instances": 0}}}, "spec.spark.executor.instances", "greater than or equal to 1"),
    ({"commitInterval": "1s"}, "spec.commitInterval", "unknown field"),
])
def test_invalid_specs_are_rejected_at_apply_naming_the_field(kube: Kube, spec: dict[str, Any], field: str,
                                                              message: str) -> None:
    with pytest.raises(client.ApiException) as raised:
        kube.create_sync("bad", generator_spec(UNUSED_CATALOG, **spec))
    strict_decoding = message == "unknown field"  # rejected while decoding (400), before validation (422)
    assert raised.value.status == (400 if strict_decoding else 422), raised.value.body
    body = json.loads(raised.value.body)
    assert field in body["message"] and message in body["message"], body["message"]


def test_valid_spec_gets_defaults_and_printer_columns(kube: Kube) -> None:
    created = kube.create_sync("ok", generator_spec(UNUSED_CATALOG))
    assert created["spec"]["commit"] == {"interval": "1s", "targetFileSize": "512Mi", "maxStagedSize": "1Gi",
                                         "pollInterval": "1s"}
    assert created["spec"]["spark"]["driver"] == {"cores": 1, "memory": "1g"}
    assert created["spec"]["suspend"] is False
    api_client = kube.api_client
    response = api_client.call_api(
        "GET", f"{api_client.configuration.host}/apis/icebergsync.io/v1alpha1/namespaces/{kube.namespace}/icebergsyncs",
        header_params={**api_client.default_headers, "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    response.read()
    table = json.loads(response.data)
    assert [column["name"] for column in table["columnDefinitions"]] == [
        "Name", "Phase", "Version", "Ready", "Last Commit", "Lag", "Tables", "Age"]
    # The table count of a sync of many tables shows only in `kubectl get -o wide`.
    assert [column["name"] for column in table["columnDefinitions"] if column["priority"] > 0] == ["Tables"]


# --- the controller, with application states set by the test -----------------------------


def test_create_renders_the_application_configmap_and_secret_mounts(kube: Kube, start_operator: StartOperator,
                                                                   warehouse: Lake) -> None:
    kube.core.create_namespaced_secret(kube.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="catalog-creds"), string_data={"token": "s3cr3t-value"}))
    spec = generator_spec(
        catalog={**warehouse, "secretRef": {"name": "catalog-creds"}},
        spark={"image": "example/icebergsync:dev", "serviceAccount": "spark",
               "driver": {"cores": 2, "memory": "2g"}, "executor": {"cores": 1, "memory": "3g", "instances": 4},
               "conf": {"spark.sql.shuffle.partitions": "4"}})
    sync = kube.create_sync("orders", spec)
    operator = start_operator("--allowed-images", "example/", "--allowed-service-accounts", "spark")

    app = kube.wait_applications({"orders-v1"})["orders-v1"]
    assert app["metadata"]["ownerReferences"] == [{
        "apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "name": "orders",
        "uid": sync["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    assert app["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "icebergsync",
                                         "icebergsync.io/sync": "orders", "icebergsync.io/sink-version": "1"}
    assert app["spec"]["arguments"] == ["run", "/etc/icebergsync/spec/sync.yaml", "--sink-version", "1",
                                        "--master", ""]
    assert app["spec"]["image"] == "example/icebergsync:dev"
    assert app["spec"]["sparkConf"] == {"spark.sql.shuffle.partitions": "4", **QUICK_JIT, **CLUSTER_SPARK_CONF}
    driver, executor = app["spec"]["driver"], app["spec"]["executor"]
    assert (driver["cores"], driver["memory"], driver["serviceAccount"]) == (2, "2g", "spark")
    assert (executor["cores"], executor["memory"], executor["instances"]) == (1, "3g", 4)
    for pod in (driver, executor):
        assert pod["secrets"] == [{"name": "catalog-creds", "path": "/etc/icebergsync/secrets/catalog-creds",
                                   "secretType": "Generic"}]
    configmap_name = mounted_spec_configmap(app)
    assert configmap_name.startswith("orders-v1-spec-")
    for pod in (driver, executor):
        template = pod["template"]["spec"]
        assert template["volumes"][0] == {"name": "icebergsync-spec", "configMap": {"name": configmap_name}}
        assert [v["emptyDir"] for v in template["volumes"][1:]] == [{}, {}]  # scratch under a read-only root
        assert template["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert (driver["template"]["spec"]["automountServiceAccountToken"],
            executor["template"]["spec"]["automountServiceAccountToken"]) == (True, False)

    configmap = kube.configmaps()[configmap_name]
    assert configmap.immutable is True
    document = yaml.safe_load(configmap.data["sync.yaml"])
    assert document["metadata"] == {"name": "orders", "namespace": kube.namespace}
    assert document["spec"] == kube.get_sync("orders")["spec"]  # type: ignore[index]
    assert "status" not in document

    status = kube.wait_status("orders", "launched", lambda s: s.get("sinkVersion") == 1)
    assert status["application"] == "orders-v1"
    assert status["phase"] == "Pending"
    assert status["observedGeneration"] == 1
    assert kube.event_reasons("orders")[:1] == ["Launched"]

    everything = json.dumps([kube.applications(), kube.configmaps()[configmap_name].data, kube.get_sync("orders")])
    secret_text = base64.b64encode(b"s3cr3t-value").decode()
    assert "s3cr3t-value" not in everything and secret_text not in everything
    metrics = operator.metrics()
    assert metrics['icebergsync_operator_launches_total{reason="Launched"}'] == 1.0
    assert metrics['icebergsync_operator_reconciles_total{result="ok"}'] >= 2


def test_nothing_is_launched_while_the_catalog_does_not_answer(kube: Kube, start_operator: StartOperator) -> None:
    """The table's sink version is unknown: a launch would guess its version. The sync waits instead."""
    kube.create_sync("orders", generator_spec(catalog={"type": "rest", "uri": "http://127.0.0.1:9/catalog"}))
    operator = start_operator("--allowed-catalog-uris", "http://127.0.0.1:9")
    kube.wait_status("orders", "waiting for the catalog", lambda s: any(
        c["type"] == "Reconciling" and c["reason"] == "WaitingForCatalog" for c in s.get("conditions", [])))
    operator.wait_reconciles(3)
    assert kube.applications() == {}
    status = kube.status("orders")
    assert "sinkVersion" not in status
    assert kube.condition("orders", "Ready") == ("False", "WaitingForCatalog")
    assert kube.event_reasons("orders") == ["WaitingForCatalog"]
    assert operator.metrics()[f'icebergsync_sync_catalog_unreachable{{name="orders",namespace="{kube.namespace}"}}'] == 1


def test_a_binary_catalog_secret_is_a_condition_and_an_event_not_a_crash(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    kube.core.create_namespaced_secret(kube.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="catalog-creds"),
        data={"token": base64.b64encode(b"\xff\xfe\x00binary").decode()}))
    kube.create_sync("orders", generator_spec(catalog={**warehouse, "secretRef": {"name": "catalog-creds"}}))
    operator = start_operator()
    status = kube.wait_status("orders", "waiting for the catalog", lambda s: any(
        c["reason"] == "WaitingForCatalog" for c in s.get("conditions", [])))
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert "the value of key 'token' is not UTF-8 text" in ready["message"]
    operator.wait_reconciles(2)
    assert kube.event_reasons("orders") == ["WaitingForCatalog"]
    assert kube.applications() == {}
    assert 'icebergsync_operator_reconciles_total{result="error"}' not in operator.metrics()


def test_a_spec_outside_the_admins_policy_is_refused_with_a_condition_and_an_event(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    kube.create_sync("orders", generator_spec(warehouse, spark={
        "serviceAccount": "cluster-admin",
        "conf": {"spark.kubernetes.driver.volumes.hostPath.root.mount.path": "/host"}}))
    operator = start_operator("--allowed-service-accounts", "icebergsync-spark")
    status = kube.wait_status("orders", "refused", lambda s: s.get("phase") == "Failed")
    assert kube.condition("orders", "Stalled") == ("True", "PolicyViolation")
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert "'cluster-admin' is not allowed" in stalled["message"]
    assert "spark.kubernetes.driver.volumes.hostPath.root.mount.path' is not among the allowed keys" in stalled["message"]
    operator.wait_reconciles(2)
    assert kube.applications() == {}
    assert kube.event_reasons("orders") == ["PolicyViolation"]

    kube.patch_spec("orders", {"spark": {"serviceAccount": "icebergsync-spark", "conf": None}})
    app = kube.wait_applications({"orders-v1"})["orders-v1"]
    assert app["spec"]["driver"]["serviceAccount"] == "icebergsync-spark"
    assert app["spec"]["sparkConf"] == {**QUICK_JIT, **CLUSTER_SPARK_CONF}  # only the product's defaults are left


def test_a_nested_type_the_api_server_admits_but_the_grammar_refuses_stalls_naming_where(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    """The API server checks a nested column type's shape only; the operator parses it and stalls the sync with
    InvalidSpec, naming the field and where the type breaks, and launches nothing."""
    spec = generator_spec(warehouse)
    spec["source"] = {"files": {"path": "/in"}}
    spec["schema"] = [{"name": "id", "type": "long"}, {"name": "e", "type": "struct<a int>"}]
    kube.create_sync("nested", spec)
    operator = start_operator()
    status = kube.wait_status("nested", "refused", lambda s: s.get("phase") == "Failed")
    assert kube.condition("nested", "Stalled") == ("True", "InvalidSpec")
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert "spec.schema[1].type" in stalled["message"] and "expected ':' at position 10" in stalled["message"]
    operator.wait_reconciles(1)
    assert kube.applications() == {}


def test_spec_change_raises_the_version_and_removes_the_old_application(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    kube.create_sync("trips", generator_spec(warehouse))
    start_operator()
    kube.wait_applications({"trips-v1"})
    kube.set_state("trips-v1", "RUNNING")

    kube.patch_spec("trips", {"commit": {"interval": "2s"}})
    mounted = mounted_spec_configmap(kube.wait_applications({"trips-v2"})["trips-v2"])
    wait_for("old ConfigMap deleted", lambda: [name for name in kube.configmaps() if name.startswith("trips-")]
             == [mounted])
    status = kube.wait_status("trips", "version 2", lambda s: s.get("sinkVersion") == 2)
    assert status["observedGeneration"] == 2
    assert status["application"] == "trips-v2"
    assert yaml.safe_load(kube.configmaps()[mounted].data["sync.yaml"])["spec"]["commit"]["interval"] == "2s"
    assert kube.event_reasons("trips") == ["Launched", "Upgraded"]


def test_a_configmap_left_from_an_earlier_launch_is_never_mounted_for_another_spec(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    """A failed launch left spec ConfigMaps behind (any name it may have used); the launch mounts its own spec."""
    stale_spec = generator_spec(warehouse, commit={"interval": "9s"})
    stale = yaml.safe_dump({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                            "metadata": {"name": "trips", "namespace": kube.namespace}, "spec": stale_spec})
    for name in ("trips-v1-spec", "trips-v1-spec-stale"):
        kube.core.create_namespaced_config_map(kube.namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name, labels={"app.kubernetes.io/managed-by": "icebergsync",
                                                            "icebergsync.io/sync": "trips"}),
            data={"sync.yaml": stale}, immutable=True))
    kube.create_sync("trips", generator_spec(warehouse))
    start_operator()

    mounted = mounted_spec_configmap(kube.wait_applications({"trips-v1"})["trips-v1"])
    document = yaml.safe_load(kube.configmaps()[mounted].data["sync.yaml"])
    assert document["spec"] == kube.get_sync("trips")["spec"]  # type: ignore[index]
    assert document["spec"]["commit"]["interval"] == "1s"


def test_suspend_deletes_the_application_and_resume_launches_a_new_version(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    kube.create_sync("trips", generator_spec(warehouse))
    start_operator()
    kube.wait_applications({"trips-v1"})
    kube.set_state("trips-v1", "RUNNING")

    kube.patch_spec("trips", {"suspend": True})
    kube.wait_applications(set())
    status = kube.wait_status("trips", "suspended", lambda s: s.get("phase") == "Suspended")
    assert status["sinkVersion"] == 1
    assert "application" not in status
    assert kube.condition("trips", "Ready") == ("False", "Suspended")

    kube.patch_spec("trips", {"suspend": False})
    kube.wait_applications({"trips-v2"})
    kube.wait_status("trips", "resumed", lambda s: s.get("sinkVersion") == 2 and s.get("phase") == "Pending")
    assert kube.event_reasons("trips") == ["Launched", "Suspended", "Resumed"]


def test_failures_are_relaunched_with_backoff_then_stall_and_a_fenced_version_is_not(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    kube.create_sync("trips", generator_spec(warehouse))
    operator = start_operator("--stall-after-failures", "2")
    kube.wait_applications({"trips-v1"})

    kube.set_state("trips-v1", "FAILED", CRASHED)
    kube.wait_applications({"trips-v2"})
    status = kube.wait_status("trips", "first relaunch", lambda s: s.get("restarts") == 1)
    assert status["consecutiveFailures"] == 1
    assert kube.condition("trips", "Stalled") == ("False", "AsExpected")

    kube.set_state("trips-v2", "SUBMISSION_FAILED", "failed to run spark-submit")
    kube.wait_applications({"trips-v3"})
    status = kube.wait_status("trips", "second relaunch", lambda s: s.get("restarts") == 2)
    assert status["consecutiveFailures"] == 2
    assert kube.condition("trips", "Stalled") == ("True", "TooManyFailures")
    assert kube.events("trips") == [("Normal", "Launched"), ("Warning", "Failed"), ("Normal", "Relaunched"),
                                    ("Warning", "Failed"), ("Warning", "Stalled"), ("Normal", "Relaunched")]

    kube.set_state("trips-v3", "FAILED", FENCED)
    kube.wait_status("trips", "fenced", lambda s: s.get("phase") == "Failed"
                     and any(c["reason"] == "Fenced" for c in s["conditions"]))
    operator.wait_reconciles(5)
    assert set(kube.applications()) == {"trips-v3"}
    assert kube.status("trips")["sinkVersion"] == 3
    assert kube.event_reasons("trips")[-1] == "Fenced"
    assert operator.metrics()['icebergsync_operator_failures_total{reason="Fenced"}'] == 1.0


def test_a_clean_exit_of_an_unbounded_source_is_relaunched_and_bad_input_stalls(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    kube.create_sync("trips", generator_spec(warehouse, source={"generator": {"rowsPerSecond": 10}}))
    operator = start_operator()
    kube.wait_applications({"trips-v1"})
    kube.set_state("trips-v1", "RUNNING")
    kube.set_state("trips-v1", "COMPLETED")
    kube.wait_applications({"trips-v2"})
    status = kube.wait_status("trips", "relaunched", lambda s: s.get("restarts") == 1)
    assert status["phase"] != "Completed"
    assert kube.event_reasons("trips")[:3] == ["Launched", "Failed", "Relaunched"]

    kube.set_state("trips-v2", "FAILED", "driver container failed with ExitCode: 65, Reason: Error")
    kube.wait_status("trips", "stalled on bad input", lambda s: s.get("phase") == "Failed")
    assert kube.condition("trips", "Stalled") == ("True", "BadInput")
    operator.wait_reconciles(5)
    assert set(kube.applications()) == {"trips-v2"}
    assert kube.event_reasons("trips")[-1] == "BadInput"


def test_vanished_application_is_relaunched(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    kube.create_sync("trips", generator_spec(warehouse))
    start_operator()
    kube.wait_applications({"trips-v1"})
    kube.custom.delete_namespaced_custom_object("sparkoperator.k8s.io", "v1beta2", kube.namespace,
                                                "sparkapplications", "trips-v1")
    kube.wait_applications({"trips-v2"})
    assert kube.wait_status("trips", "restart counted", lambda s: s.get("restarts") == 1)


def test_delete_removes_applications_and_clears_the_finalizer(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    kube.create_sync("trips", generator_spec(warehouse))
    start_operator()
    kube.wait_applications({"trips-v1"})
    assert kube.get_sync("trips")["metadata"]["finalizers"] == ["icebergsync.io/finalizer"]  # type: ignore[index]

    kube.delete_sync("trips")
    wait_for("IcebergSync gone", lambda: kube.get_sync("trips") is None)
    assert kube.applications() == {}
    assert not [name for name in kube.configmaps() if name.startswith("trips-")]


def test_operator_restart_neither_duplicates_nor_bumps_the_version(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    kube.create_sync("trips", generator_spec(warehouse))
    first = start_operator()
    kube.wait_applications({"trips-v1"})
    kube.set_state("trips-v1", "RUNNING")
    kube.wait_status("trips", "running", lambda s: s.get("phase") == "Running")
    first.stop()

    second = start_operator()
    second.wait_reconciles(5)
    assert set(kube.applications()) == {"trips-v1"}
    status = kube.status("trips")
    assert (status["sinkVersion"], status["restarts"], status["observedGeneration"]) == (1, 0, 1)
    assert kube.event_reasons("trips") == ["Launched"]
    assert 'icebergsync_operator_launches_total{reason="Launched"}' not in second.metrics()


def test_two_replicas_never_both_act(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    """The older replica outranks the newer one in kopf peering; the newer stays paused until it is gone."""
    active = start_operator()
    active.wait_logged("Resuming operations", "the first replica to become active")
    standby = start_operator()
    peers = wait_for("both replicas in the KopfPeering", lambda: (lambda status: status if len(status) == 2 else None)(
        kube.custom.get_namespaced_custom_object("kopf.dev", "v1", kube.namespace, "kopfpeerings", "icebergsync")
        .get("status") or {}))
    assert len({peer["priority"] for peer in peers.values()}) == 2, "replicas must never tie (a tie freezes both)"
    assert "Resuming operations" not in standby.log()

    kube.create_sync("trips", generator_spec(warehouse))
    kube.wait_applications({"trips-v1"})
    active.wait_reconciles(3)
    assert standby.reconciles() == 0
    assert set(kube.applications()) == {"trips-v1"}

    active.stop()
    standby.wait_logged("Resuming operations", "standby resumes")
    kube.patch_spec("trips", {"commit": {"interval": "2s"}})
    kube.wait_applications({"trips-v2"})
    assert standby.reconciles() > 0
    assert kube.event_reasons("trips") == ["Launched", "Upgraded"]


def test_an_operator_told_not_to_create_the_peering_waits_for_it(
        kube: Kube, start_operator: StartOperator, warehouse: Lake, tmp_path: Path) -> None:
    """What the chart runs: helm creates the KopfPeering after the operator's Deployment, so the operator waits for
    the object rather than creating it first (which failed ``helm install`` with "already exists")."""
    log = tmp_path / "operator-0.log"  # the first operator start_operator starts logs here

    def create_the_peering_once_awaited() -> None:
        wait_for("the operator to wait for its peering object",
                 lambda: log.exists() and "waiting for the peering object" in log.read_text())
        kube.custom.create_namespaced_custom_object("kopf.dev", "v1", kube.namespace, "kopfpeerings", {
            "apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "icebergsync"}})

    with ThreadPoolExecutor(max_workers=1) as pool:
        created = pool.submit(create_the_peering_once_awaited)
        start_operator("--no-create-peering")
        created.result()  # a 409 here: the operator created the object itself
    kube.create_sync("trips", generator_spec(warehouse))
    kube.wait_applications({"trips-v1"})


# --- end to end: the real job, run by the Spark Operator stand-in -------------------------


def _table_ids(catalog: dict[str, str]) -> list[int]:
    table = open_catalog(Catalog(uri=catalog["uri"], warehouse=catalog["warehouse"])).load_table("db.trips")
    return sorted(pc.cast(table.scan(selected_fields=("id",)).to_arrow()["id"], "int64").to_pylist())


def test_bounded_sync_commits_and_reports_the_snapshot(kube: Kube, start_operator: StartOperator,
                                                       spark_operator_standin: StartSpark,
                                                       warehouse: Lake) -> None:
    kube.core.create_namespaced_secret(kube.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="catalog-props"), string_data={"echo": "false"}))
    standin = spark_operator_standin()
    kube.create_sync("trips", generator_spec(
        catalog={**warehouse, "secretRef": {"name": "catalog-props"}},
        source={"generator": {"rowsPerSecond": 5000, "totalRows": 2000}}))
    start_operator()

    status = kube.wait_status("trips", "completed", lambda s: s.get("phase") == "Completed", timeout=240)
    assert standin.exit_code("trips-v1") == 0, standin.driver_log("trips-v1")[-3000:]
    commit = status["lastCommit"]
    assert json.loads(commit["frontier"]) == {"next_id": 2000}
    assert commit["sinkVersion"] == 1 and commit["snapshotId"] and commit["committedAt"]
    assert commit["recordsAdded"] >= 1
    assert kube.condition("trips", "Ready") == ("True", "Completed")
    assert kube.event_reasons("trips") == ["Launched", "Completed"]
    assert _table_ids(warehouse) == list(range(2000))


def test_spec_change_mid_stream_is_exactly_once_and_fences_the_old_version(
        kube: Kube, start_operator: StartOperator, spark_operator_standin: StartSpark, warehouse: Lake) -> None:
    standin = spark_operator_standin(linger_on_delete=True)  # the old driver keeps running: only the fence stops it
    kube.create_sync("trips", generator_spec(catalog=warehouse, source={"generator": {"rowsPerSecond": 300}}))
    start_operator()

    kube.wait_status("trips", "Ready with a data commit of version 1", lambda s: (s.get("lastCommit") or {}).get(
        "sinkVersion") == 1 and s["lastCommit"].get("recordsAdded", 0) > 0 and any(
        c["type"] == "Ready" and c["status"] == "True" for c in s["conditions"]), timeout=180)

    kube.patch_spec("trips", {"commit": {"interval": "2s"}})
    kube.wait_applications({"trips-v2"})
    wait_for("version 1 fenced (exit 75)", lambda: standin.exit_code("trips-v1") is not None, timeout=180)
    assert standin.exit_code("trips-v1") == 75, standin.driver_log("trips-v1")[-3000:]
    kube.wait_status("trips", "Ready with a data commit of version 2", lambda s: (s.get("lastCommit") or {}).get(
        "sinkVersion") == 2 and s["lastCommit"].get("recordsAdded", 0) > 0 and any(
        c["type"] == "Ready" and c["status"] == "True" for c in s["conditions"]), timeout=180)

    standin.linger_on_delete = False  # from now on a deleted application's driver is stopped (SIGTERM)
    kube.delete_sync("trips")  # the finalizer deletes v2
    wait_for("version 2 stopped", lambda: standin.exit_code("trips-v2") is not None, timeout=120)
    assert standin.exit_code("trips-v2") == 0, standin.driver_log("trips-v2")[-3000:]
    ids = _table_ids(warehouse)  # the table and its data are kept
    assert ids == list(range(len(ids))), "every generated record exactly once, none missing"
    assert len(ids) > 0
