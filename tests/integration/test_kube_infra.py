"""Prove the Kubernetes test infrastructure (tests/infra/kube.py) is real: a pinned kube-apiserver
with RBAC, the Spark Operator CRDs Established and validating, and the pinned helm and
spark-operator binaries."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.infra.kube import KubeCluster, KubeTools, apply_crd, crd_conditions

GROUP = "sparkoperator.k8s.io"
VERSION = "v1beta2"
PLURAL = "sparkapplications"


def _namespace(cluster: KubeCluster) -> str:
    """A fresh namespace (never deleted: without kube-controller-manager it would stay Terminating)."""
    name = f"infra-{uuid.uuid4().hex[:8]}"
    with cluster.api_client() as api_client:
        client.CoreV1Api(api_client).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )
    return name


def _spark_app(name: str, namespace: str, **spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": "Python",
        "mode": "cluster",
        "sparkVersion": "4.0.1",
        "image": "spark:4.0.1",
        "mainApplicationFile": "local:///opt/spark/examples/src/main/python/pi.py",
        "driver": {"cores": 1, "memory": "512m", "serviceAccount": "spark"},
        "executor": {"instances": 1, "cores": 1, "memory": "512m"},
    }
    spec.update(spec_overrides)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def test_apiserver_reports_pinned_version(kube_cluster: KubeCluster, kube_tools: KubeTools) -> None:
    with kube_cluster.api_client() as api_client:
        info = client.VersionApi(api_client).get_code()
    assert info.git_version == kube_tools.k8s_version == kube_cluster.version
    major, minor = kube_tools.k8s_version.removeprefix("v").split(".")[:2]
    assert (info.major, info.minor) == (major, minor)
    assert info.git_tree_state == "archive"


def test_kubeconfig_and_env(kube_cluster: KubeCluster) -> None:
    assert kube_cluster.server.startswith("https://127.0.0.1:")
    assert kube_cluster.env["KUBECONFIG"] == str(kube_cluster.kubeconfig)
    doc = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    assert doc["clusters"][0]["cluster"]["server"] == kube_cluster.server
    with kube_cluster.api_client() as api_client:
        names = {ns.metadata.name for ns in client.CoreV1Api(api_client).list_namespace().items}
    assert {"default", "kube-system"} <= names


def test_spark_application_crd_established(kube_cluster: KubeCluster) -> None:
    for name in (f"{PLURAL}.{GROUP}", f"scheduledsparkapplications.{GROUP}", f"sparkconnects.{GROUP}"):
        conditions = crd_conditions(kube_cluster, name)
        assert conditions["Established"]["status"] == "True", conditions
        assert conditions["NamesAccepted"]["status"] == "True", conditions


def test_spark_application_create_and_read_back(kube_cluster: KubeCluster) -> None:
    namespace = _namespace(kube_cluster)
    body = _spark_app("pi", namespace)
    with kube_cluster.api_client() as api_client:
        api = client.CustomObjectsApi(api_client)
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        got = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "pi")
    assert got["kind"] == "SparkApplication"
    assert got["metadata"]["uid"]
    assert got["spec"]["type"] == "Python"
    assert got["spec"]["mainApplicationFile"] == body["spec"]["mainApplicationFile"]
    assert got["spec"]["executor"] == {"instances": 1, "cores": 1, "memory": "512m"}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"type": "Cobol"}, "spec.type"),
        ({"executor": {"instances": 0, "cores": 1}}, "spec.executor.instances"),
    ],
)
def test_invalid_spark_application_is_rejected_by_schema(
    kube_cluster: KubeCluster, overrides: dict[str, Any], field: str
) -> None:
    namespace = _namespace(kube_cluster)
    with kube_cluster.api_client() as api_client:
        api = client.CustomObjectsApi(api_client)
        with pytest.raises(ApiException) as err:
            api.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, _spark_app("bad", namespace, **overrides)
            )
    assert err.value.status == 422, err.value.body
    assert field in err.value.body


def test_spark_application_missing_required_field_is_rejected(kube_cluster: KubeCluster) -> None:
    namespace = _namespace(kube_cluster)
    body = _spark_app("bad", namespace)
    del body["spec"]["mainApplicationFile"]
    with kube_cluster.api_client() as api_client, pytest.raises(ApiException) as err:
        client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body
        )
    assert err.value.status == 422, err.value.body
    assert "mainApplicationFile" in err.value.body


def test_rbac_is_enforced(kube_cluster: KubeCluster) -> None:
    from kubernetes import config

    namespace = _namespace(kube_cluster)
    alice = config.new_client_from_config(config_file=str(kube_cluster.make_user_kubeconfig("alice")))
    with alice:
        api = client.CustomObjectsApi(alice)
        with pytest.raises(ApiException) as err:
            api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        assert err.value.status == 403

        with kube_cluster.api_client() as admin:
            rbac = client.RbacAuthorizationV1Api(admin)
            rbac.create_namespaced_role(
                namespace,
                {
                    "metadata": {"name": "spark-reader"},
                    "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list"]}],
                },
            )
            rbac.create_namespaced_role_binding(
                namespace,
                {
                    "metadata": {"name": "alice-spark-reader"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": "spark-reader",
                    },
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
                },
            )
        # The RBAC authorizer reads an informer cache: a new binding takes effect shortly, not instantly.
        deadline = time.monotonic() + 30
        while True:
            try:
                listed = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
                break
            except ApiException as denied:
                assert denied.status == 403 and time.monotonic() < deadline, "the RoleBinding never took effect"
                time.sleep(0.2)
        assert listed["items"] == []
        with pytest.raises(ApiException) as err:
            api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _spark_app("x", namespace))
        assert err.value.status == 403


def test_apply_crd_helper_is_idempotent(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.infra-test.icebergsync.io"},
        "spec": {
            "group": "infra-test.icebergsync.io",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    assert apply_crd(kube_cluster, path) == ["widgets.infra-test.icebergsync.io"]
    assert apply_crd(kube_cluster, path) == ["widgets.infra-test.icebergsync.io"]
    with kube_cluster.api_client() as api_client:
        api = client.CustomObjectsApi(api_client)
        body = {"apiVersion": "infra-test.icebergsync.io/v1", "kind": "Widget", "metadata": {"name": "w"}}
        api.create_namespaced_custom_object(
            "infra-test.icebergsync.io", "v1", "default", "widgets", {**body, "spec": {"size": 2}}
        )
        with pytest.raises(ApiException) as err:
            api.create_namespaced_custom_object(
                "infra-test.icebergsync.io",
                "v1",
                "default",
                "widgets",
                {**body, "metadata": {"name": "w0"}, "spec": {"size": 0}},
            )
        assert err.value.status == 422


def test_helm_version_is_pinned(helm_binary: Path, kube_tools: KubeTools) -> None:
    out = subprocess.run(
        [str(helm_binary), "version", "--template", "{{.Version}}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == kube_tools.helm_version


def test_spark_operator_version_is_pinned(kube_tools: KubeTools) -> None:
    out = subprocess.run(
        [str(kube_tools.spark_operator), "version"], capture_output=True, text=True, check=True, timeout=60
    )
    reported = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    assert reported["Spark Operator Version"] == kube_tools.spark_operator_version
    assert reported["Git Tree State"] == "clean"


def test_helm_talks_to_cluster(kube_cluster: KubeCluster, helm_binary: Path) -> None:
    out = subprocess.run(
        # A namespace of its own: other tests' releases elsewhere in the shared cluster don't count.
        [str(helm_binary), "list", "--namespace", f"empty-{uuid.uuid4().hex[:8]}", "--output", "json"],
        env=kube_cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout) == []
