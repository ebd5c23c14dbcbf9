"""The real Kubeflow Spark Operator controller takes what the IcebergSync operator renders.

Both operators run as processes against the real test API server. That server has no nodes:
the controller's spark-submit creates the driver pod, which is never scheduled. The test plays
the kubelet only where one is missing (it reports the driver container running, then exited,
through the pod status subresource); everything else -- submission, the driver pod, application
states and their messages -- is the real controller's doing, read back from the API.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.conftest import Kube, OperatorProcess, wait_for
from tests.infra.spark_operator import SparkOperatorController

StartOperator = Callable[..., OperatorProcess]
StartSparkOperator = Callable[[Sequence[str]], SparkOperatorController]
# spark-submit is a JVM start on a busy machine: allow it time.
SUBMIT_SECONDS = 300.0
DRIVER_CONTAINER = "spark-kubernetes-driver"
IMAGE = "example/icebergsync:dev"


def _spec(catalog: dict[str, str]) -> dict[str, Any]:
    return {
        "source": {"generator": {"rowsPerSecond": 1000, "totalRows": 1000}},
        "table": {"name": "db.trips", "catalog": {**catalog, "secretRef": {"name": "catalog-creds"}}},
        "commit": {"interval": "1s"},
        "spark": {"image": IMAGE, "serviceAccount": "spark",
                  "driver": {"cores": 2, "memory": "1g"}, "executor": {"cores": 1, "memory": "1g", "instances": 2}},
    }


def _application(kube: Kube, name: str) -> dict[str, Any] | None:
    return kube.applications().get(name)


def _wait_state(kube: Kube, controller: SparkOperatorController, name: str, state: str,
                timeout: float = 120.0) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        app = _application(kube, name)
        current = ((app or {}).get("status") or {}).get("applicationState", {})
        if current.get("state") in ("FAILED", "SUBMISSION_FAILED") and state != current.get("state"):
            pytest.fail(f"{name} is {current}; Spark Operator log:\n{controller.log_tail()}")
        return app if current.get("state") == state else None

    return wait_for(f"{name} to be {state}", reached, timeout=timeout)


def _report_driver(kube: Kube, pod: client.V1Pod, exit_code: int | None = None) -> None:
    """What the kubelet would write (this tier has none): the driver container running, or, with
    ``exit_code``, terminated with that code."""
    container = pod.spec.containers[0]
    running = exit_code is None
    state: dict[str, Any] = (
        {"running": {"startedAt": "2026-01-01T00:00:00Z"}} if running else
        {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed",
                        "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:00Z"}})
    kube.core.patch_namespaced_pod_status(pod.metadata.name, kube.namespace, {"status": {
        "phase": "Running" if running else ("Succeeded" if exit_code == 0 else "Failed"),
        "conditions": [{"type": "Ready", "status": "True" if running else "False"}],
        "containerStatuses": [{"name": container.name, "image": container.image, "imageID": "",
                               "ready": running, "restartCount": 0, "started": running, "state": state}],
    }})


def test_real_spark_operator_submits_what_the_operator_renders(
        kube: Kube, start_operator: StartOperator, spark_operator: StartSparkOperator,
        warehouse: dict[str, str]) -> None:
    kube.core.create_namespaced_service_account(kube.namespace, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name="spark")))
    kube.core.create_namespaced_secret(kube.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="catalog-creds"), string_data={"token": "s3cr3t-value"}))
    controller = spark_operator([kube.namespace])
    kube.create_sync("orders", _spec(warehouse))
    operator = start_operator("--allowed-images", IMAGE, "--allowed-service-accounts", "spark")

    app = _wait_state(kube, controller, "orders-v1", "SUBMITTED", timeout=SUBMIT_SECONDS)
    assert controller.alive(), controller.log_tail()
    status = app["status"]
    assert status["submissionAttempts"] == 1
    pod_name = status["driverInfo"]["podName"]
    assert pod_name == "orders-v1-driver"

    pod = kube.core.read_namespaced_pod(pod_name, kube.namespace)
    # Created by spark-submit from the rendered application, owned by it, and not waiting for a
    # webhook: no mutated-by-spark-operator label.
    assert [(ref.kind, ref.name, ref.uid, ref.controller) for ref in pod.metadata.owner_references] == [
        ("SparkApplication", "orders-v1", app["metadata"]["uid"], True)]
    labels = pod.metadata.labels
    assert {key: labels.get(key) for key in (
        "app.kubernetes.io/managed-by", "icebergsync.io/sync", "icebergsync.io/sink-version",
        "sparkoperator.k8s.io/app-name", "sparkoperator.k8s.io/launched-by-spark-operator", "spark-role")} == {
        "app.kubernetes.io/managed-by": "icebergsync", "icebergsync.io/sync": "orders",
        "icebergsync.io/sink-version": "1", "sparkoperator.k8s.io/app-name": "orders-v1",
        "sparkoperator.k8s.io/launched-by-spark-operator": "true", "spark-role": "driver"}
    assert "sparkoperator.k8s.io/mutated-by-spark-operator" not in labels
    assert labels["sparkoperator.k8s.io/submission-id"] == status["submissionID"]

    assert pod.spec.service_account_name == "spark"
    assert pod.spec.security_context.run_as_non_root is True
    assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    [driver] = [c for c in pod.spec.containers if c.name == DRIVER_CONTAINER]
    assert driver.image == IMAGE
    assert driver.security_context.allow_privilege_escalation is False
    assert driver.security_context.capabilities.drop == ["ALL"]
    assert driver.resources.requests["cpu"] == "2"
    # The job's metrics port (spec.metrics), where the chart's PodMonitor scrapes it, beside Spark's own ports.
    assert [(p.name, p.container_port) for p in driver.ports if p.name == "metrics"] == [("metrics", 8090)]
    assert pod.metadata.annotations["prometheus.io/port"] == "8090"
    # Spark's driver command running the job's entry point with the rendered arguments.
    assert driver.args[0] == "driver", driver.args
    assert driver.args[-8:] == ["org.apache.spark.deploy.PythonRunner", "local:///opt/icebergsync/spark_app/main.py",
                                "run", "/etc/icebergsync/spec/sync.yaml", "--sink-version", "1", "--master", ""], \
        driver.args

    volumes = {volume.name: volume for volume in pod.spec.volumes}
    mounts = {mount.mount_path: mount for mount in driver.volume_mounts}
    spec_mount = mounts["/etc/icebergsync/spec"]
    assert spec_mount.read_only is True
    spec_configmap = volumes[spec_mount.name].config_map.name
    assert spec_configmap.startswith("orders-v1-spec-")
    assert kube.configmaps()[spec_configmap].immutable is True
    secret_mount = mounts["/etc/icebergsync/secrets/catalog-creds"]
    assert volumes[secret_mount.name].secret.secret_name == "catalog-creds"

    sync = kube.wait_status("orders", "launched", lambda s: s.get("sinkVersion") == 1)
    assert (sync["application"], sync["phase"]) == ("orders-v1", "Pending")

    # The driver container starts: the real controller moves the application to RUNNING, and
    # the IcebergSync operator reports it.
    _report_driver(kube, pod)
    app = _wait_state(kube, controller, "orders-v1", "RUNNING")
    assert app["status"]["driverInfo"]["podName"] == pod_name
    kube.wait_status("orders", "running", lambda s: s.get("phase") == "Running")

    # The driver exits with the fenced status (75): the controller fails the application with its
    # own message, which the IcebergSync operator reads as fenced and does not relaunch.
    _report_driver(kube, pod, exit_code=75)
    app = _wait_state(kube, controller, "orders-v1", "FAILED")
    assert app["status"]["applicationState"]["errorMessage"] == \
        "driver container failed with ExitCode: 75, Reason: Error"
    kube.wait_status("orders", "fenced", lambda s: s.get("phase") == "Failed"
                     and any(c["reason"] == "Fenced" for c in s["conditions"]))
    operator.wait_reconciles(3)
    assert set(kube.applications()) == {"orders-v1"}
    assert kube.status("orders")["sinkVersion"] == 1

    # Deleting the sync deletes the application (and its spec ConfigMap). Its pods are then the
    # garbage collector's: this tier has none, so what is asserted here is that the driver pod is
    # owned by the application that is gone (the cluster tier sees the pods go).
    kube.delete_sync("orders")
    wait_for("the IcebergSync and its application gone",
             lambda: kube.get_sync("orders") is None and not kube.applications())
    assert spec_configmap not in kube.configmaps()
    remaining = kube.core.read_namespaced_pod(pod_name, kube.namespace)
    assert [ref.uid for ref in remaining.metadata.owner_references] == [app["metadata"]["uid"]]
