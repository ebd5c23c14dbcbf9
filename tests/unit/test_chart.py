"""The Helm chart (charts/icebergsync), rendered by the real ``helm`` binary for several value sets.

Assertions are on the rendered objects: one active replica, probes on the operator's health
endpoint, a hardened securityContext, RBAC with exactly the verbs the operator uses, and an
environment that the operator's own settings parser turns into the intended settings.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from icebergsync_operator.settings import (
    DEFAULT_ALLOWED_SPARK_CONF,
    DEFAULT_IMAGE,
    DEFAULT_SPARK_VERSION,
    parse_settings,
)

from icebergsync import crd

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "icebergsync"
RELEASE, NAMESPACE = "isync", "icebergsync-system"
FULLNAME = "isync-icebergsync"

# The operator's API use (operator/icebergsync_operator/kube.py, handlers.py and kopf itself),
# as (apiGroup, resource) -> verbs. The chart must grant exactly these, nothing more. Reading
# Secrets is granted apart (secrets-rbac.yaml), namespaced by default.
OPERATOR_RULES: dict[tuple[str, str], set[str]] = {
    ("icebergsync.io", "icebergsyncs"): {"get", "list", "watch", "patch"},
    ("icebergsync.io", "icebergsyncs/status"): {"patch"},
    ("icebergsync.io", "icebergsyncs/finalizers"): {"update"},
    ("icebergsync.io", "icebergcatalogs"): {"get", "list", "watch", "patch"},
    ("icebergsync.io", "icebergcatalogs/status"): {"patch"},
    ("sparkoperator.k8s.io", "sparkapplications"): {"list", "watch", "create", "delete"},
    ("", "configmaps"): {"get", "list", "create", "delete"},
    ("", "events"): {"create"},
}
PEERING_VERBS = {"get", "list", "watch", "patch", "create"}
CLUSTER_CATALOGS = f"{FULLNAME}-cluster-catalogs"
TENANT_ROLES = [f"{FULLNAME}-{role}" for role in ("view", "edit", "admin")]  # tests/unit/test_chart_tenants.py
CLUSTER_CATALOG_RULES = {
    ("icebergsync.io", "clustericebergcatalogs"): {"get", "list", "watch", "patch"},
    ("icebergsync.io", "clustericebergcatalogs/status"): {"patch"},
    ("", "namespaces"): {"get"},
}


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------


def helm(helm_binary: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(helm_binary), *args], capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}\n{proc.stdout}")
    return proc


def values_file(tmp_path: Path, values: dict[str, Any] | None) -> list[str]:
    if not values:
        return []
    path = tmp_path / f"values-{len(list(tmp_path.glob('values-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return ["-f", str(path)]


def render(helm_binary: Path, tmp_path: Path, values: dict[str, Any] | None = None,
           *extra: str) -> list[dict[str, Any]]:
    """Every object `helm template` renders (templates only; crds/ are checked separately)."""
    proc = helm(helm_binary, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                *values_file(tmp_path, values), *extra)
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def render_error(helm_binary: Path, tmp_path: Path, values: dict[str, Any]) -> str:
    proc = helm(helm_binary, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                *values_file(tmp_path, values), check=False)
    assert proc.returncode != 0, f"expected helm template to fail for {values}"
    return proc.stderr


def of_kind(docs: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def one(docs: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [doc for doc in of_kind(docs, kind) if name is None or doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata'] for d in found]}"
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["operator"]
    return dict(pod["containers"][0])


def env_of(docs: list[dict[str, Any]]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container(docs)["env"] if "value" in item}


def rules_of(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """A Role's rules as (group, resource) -> verbs; each pair may appear in one rule only."""
    result: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource) not in result, f"{group}/{resource} granted twice"
                assert "*" not in rule["verbs"] and resource != "*" and group != "*"
                result[(group, resource)] = set(rule["verbs"])
    return result


def settings_from(docs: list[dict[str, Any]]) -> Any:
    """The settings the operator would run with, parsed by its own parser from the rendered env."""
    cont = container(docs)
    # args, not command: the image's entrypoint (tini as PID 1) must not be bypassed.
    assert "command" not in cont and cont["args"][0] == "icebergsync-operator"
    settings, log_level = parse_settings(cont["args"][1:], env_of(docs))
    return settings, log_level


# ------------------------------------------------------------------------------------------------
# chart metadata and CRDs
# ------------------------------------------------------------------------------------------------


def test_app_version_is_the_project_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]
    assert chart["apiVersion"] == "v2" and chart["name"] == "icebergsync"
    # The operator's built-in default image is the image this chart deploys by default.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert f"{values['image']['repository']}:{chart['appVersion']}" == DEFAULT_IMAGE
    assert values["sparkVersion"] == DEFAULT_SPARK_VERSION


CHART_CRDS = ["clustericebergcatalog.yaml", "icebergcatalog.yaml", "icebergsync.yaml", "kopf-peering.yaml"]


@pytest.mark.parametrize("name", CHART_CRDS)
def test_chart_crds_are_byte_identical_to_the_generated_ones(name: str) -> None:
    assert (CHART / "crds" / name).read_bytes() == (REPO_ROOT / "crds" / name).read_bytes(), (
        f"charts/icebergsync/crds/{name} drifted: run .venv/bin/python -m icebergsync.generate --write")
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == CHART_CRDS


def test_chart_crd_is_the_model() -> None:
    assert (CHART / "crds" / "icebergsync.yaml").read_text() == crd.render_crd_yaml()


@pytest.mark.parametrize("values", [
    None,
    {"watchNamespaces": ["team-a", "team-b"], "rbac": {"scope": "namespaced"}},
    {"metrics": {"serviceMonitor": {"enabled": True}}, "replicaCount": 2},
    {"jobMetrics": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}, "dashboard": {"enabled": True}}},
    {"peering": {"enabled": False}, "metrics": {"enabled": False}, "sparkJob": {"serviceAccount": {"create": True}}},
])
def test_helm_lint(helm_binary: Path, tmp_path: Path, values: dict[str, Any] | None) -> None:
    proc = helm(helm_binary, "lint", "--strict", str(CHART), "--namespace", NAMESPACE, *values_file(tmp_path, values))
    assert "0 chart(s) failed" in proc.stdout


# ------------------------------------------------------------------------------------------------
# defaults
# ------------------------------------------------------------------------------------------------


def test_defaults_render_the_expected_objects(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path)
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted([
        ("ServiceAccount", FULLNAME),
        ("ClusterRole", FULLNAME), ("ClusterRoleBinding", FULLNAME),
        ("ClusterRole", f"{FULLNAME}-observe"), ("ClusterRoleBinding", f"{FULLNAME}-observe"),
        ("ClusterRole", CLUSTER_CATALOGS), ("ClusterRoleBinding", CLUSTER_CATALOGS),
        ("Role", f"{FULLNAME}-secrets"), ("RoleBinding", f"{FULLNAME}-secrets"),
        ("Service", f"{FULLNAME}-metrics"),
        ("Deployment", FULLNAME),
        ("PodDisruptionBudget", FULLNAME),
        ("NetworkPolicy", FULLNAME),
        ("ClusterKopfPeering", "icebergsync"),
        *[("ClusterRole", role) for role in TENANT_ROLES],
        *[(kind, f"{FULLNAME}-{resource}-secret-refs") for resource in ("icebergsyncs", "icebergcatalogs")
          for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")],
    ])
    cluster_scoped = ("ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding")
    for doc in docs:
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"]["namespace"] == NAMESPACE
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


def test_defaults_one_active_replica_with_peering(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path)
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    settings, log_level = settings_from(docs)
    assert settings.standalone is False and settings.peering_name == "icebergsync"
    assert one(docs, "ClusterKopfPeering")["metadata"]["name"] == settings.peering_name
    # The chart creates the peering object, so the operator waits for it instead of racing helm to it.
    assert settings.create_peering is False
    assert log_level == "INFO"


def test_without_the_charts_peering_object_the_operator_creates_it(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"peering": {"create": False}})
    assert not of_kind(docs, "ClusterKopfPeering") and not of_kind(docs, "KopfPeering")
    settings, _ = settings_from(docs)
    assert settings.create_peering is True and settings.standalone is False
    assert "create" in rules_of(one(docs, "ClusterRole", FULLNAME))[("kopf.dev", "clusterkopfpeerings")]


def test_defaults_operator_settings(helm_binary: Path, tmp_path: Path) -> None:
    settings, _ = settings_from(render(helm_binary, tmp_path))
    assert settings.namespaces == () and settings.clusterwide
    assert settings.default_image == DEFAULT_IMAGE
    assert settings.spark_version == DEFAULT_SPARK_VERSION
    assert settings.default_service_account is None
    assert settings.metrics_port == 9090 and settings.metrics_address == "$(ICEBERGSYNC_POD_IP)"
    assert settings.liveness_endpoint == "http://$(ICEBERGSYNC_POD_IP):8080/healthz"
    pod_ip = next(item for item in container(render(helm_binary, tmp_path))["env"]
                  if item["name"] == "ICEBERGSYNC_POD_IP")
    assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_defaults_image_and_pod(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path)
    cont = container(docs)
    assert cont["image"] == DEFAULT_IMAGE and cont["imagePullPolicy"] == "IfNotPresent"
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]
    selector = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert selector.items() <= one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    assert cont["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    assert "nodeSelector" not in pod and "tolerations" not in pod and "affinity" not in pod


def test_probes_call_the_operator_health_endpoint(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path)
    cont = container(docs)
    settings, _ = settings_from(docs)
    ports = {port["name"]: port["containerPort"] for port in cont["ports"]}
    assert settings.liveness_endpoint == f"http://$(ICEBERGSYNC_POD_IP):{ports['health']}/healthz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert cont[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
        assert cont[probe]["periodSeconds"] > 0 and cont[probe]["failureThreshold"] >= 1
    assert ports["metrics"] == settings.metrics_port


def test_security_context_is_hardened(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 185  # the image's `spark` user
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(docs)["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # The read-only root needs a writable /tmp.
    mounts = {m["mountPath"]: m["name"] for m in container(docs)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert env_of(docs)["PYTHONDONTWRITEBYTECODE"] == "1"


def test_cluster_rbac_grants_exactly_the_operator_verbs(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path)
    role = one(docs, "ClusterRole", FULLNAME)
    assert rules_of(role) == {**OPERATOR_RULES, ("kopf.dev", "clusterkopfpeerings"): PEERING_VERBS}
    observe = one(docs, "ClusterRole", f"{FULLNAME}-observe")
    assert rules_of(observe) == {("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"}}
    sa = one(docs, "ServiceAccount")["metadata"]
    for name in (FULLNAME, f"{FULLNAME}-observe"):
        binding = one(docs, "ClusterRoleBinding", name)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": NAMESPACE}]
    assert rules_of(one(docs, "ClusterRole", CLUSTER_CATALOGS)) == CLUSTER_CATALOG_RULES
    # The only Role: reading the Secrets ClusterIcebergCatalogs name, in the release namespace.
    assert [(r["metadata"]["name"], r["metadata"]["namespace"]) for r in of_kind(docs, "Role")] == [
        (f"{FULLNAME}-secrets", NAMESPACE)]


def test_catalog_values_reach_the_operator(helm_binary: Path, tmp_path: Path) -> None:
    settings, _ = settings_from(render(helm_binary, tmp_path))
    assert settings.allow_inline_catalogs is False and settings.catalog_secrets_namespace == NAMESPACE
    docs = render(helm_binary, tmp_path, {"catalogs": {"allowInline": True, "secretsNamespace": "lake-admin"}})
    settings, _ = settings_from(docs)
    assert settings.allow_inline_catalogs is True and settings.catalog_secrets_namespace == "lake-admin"
    assert _secret_readers(docs) == [("Role", "lake-admin")]


def test_metrics_service_selects_the_operator_pod(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path)
    service = one(docs, "Service")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    assert not of_kind(docs, "ServiceMonitor")


# ------------------------------------------------------------------------------------------------
# value sets
# ------------------------------------------------------------------------------------------------


def test_namespaced_rbac_with_two_namespaces(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"watchNamespaces": ["team-a", "team-b"], "rbac": {"scope": "namespaced"}})
    settings, _ = settings_from(docs)
    assert settings.namespaces == ("team-a", "team-b") and not settings.clusterwide
    roles = [role for role in of_kind(docs, "Role") if role["metadata"]["name"] == FULLNAME]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert role["metadata"]["name"] == FULLNAME
        assert rules_of(role) == {**OPERATOR_RULES, ("kopf.dev", "kopfpeerings"): PEERING_VERBS}
    bindings = [binding for binding in of_kind(docs, "RoleBinding") if binding["metadata"]["name"] == FULLNAME]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role" and binding["roleRef"]["name"] == FULLNAME
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    # No cluster-wide grant of the operator's rules; only the observation and cluster catalog roles (and the
    # tenants' roles, bound to no one by the chart).
    assert sorted(r["metadata"]["name"] for r in of_kind(docs, "ClusterRole")) == sorted([
        CLUSTER_CATALOGS, f"{FULLNAME}-observe", *TENANT_ROLES])
    assert sorted(b["roleRef"]["name"] for b in of_kind(docs, "ClusterRoleBinding")) == sorted([
        CLUSTER_CATALOGS, f"{FULLNAME}-observe"])
    assert rules_of(one(docs, "ClusterRole", f"{FULLNAME}-observe")) == {
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
        ("", "namespaces"): {"list", "watch"},
    }
    peerings = of_kind(docs, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]
    assert not of_kind(docs, "ClusterKopfPeering")


def test_namespaced_without_cluster_observation(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"watchNamespaces": ["team-a"], "rbac": {"scope": "namespaced",
                                                                                    "clusterObserve": False}})
    assert sorted(r["metadata"]["name"] for r in of_kind(docs, "ClusterRole")) == sorted([CLUSTER_CATALOGS,
                                                                                         *TENANT_ROLES])
    assert len(of_kind(docs, "Role")) == 3  # the operator's and the Secrets reader's, there and for cluster catalogs


SECRETS_ROLE = f"{FULLNAME}-secrets"


def _secret_readers(docs: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(kind, namespace) of every role granting Secrets, each checked to grant only get and to be bound."""
    found = []
    for role in of_kind(docs, "Role") + of_kind(docs, "ClusterRole"):
        rules = rules_of(role)
        if ("", "secrets") not in rules:
            continue
        assert role["metadata"]["name"] == SECRETS_ROLE and rules == {("", "secrets"): {"get"}}
        namespace = role["metadata"].get("namespace")
        binding = one([b for b in docs if b["metadata"].get("namespace") == namespace],
                      f"{role['kind']}Binding", SECRETS_ROLE)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"],
                                      "name": SECRETS_ROLE}
        found.append((role["kind"], namespace))
    return sorted(found, key=str)


def test_secrets_are_readable_only_in_the_watched_namespaces_by_default(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"watchNamespaces": ["team-a", "team-b"]})
    assert _secret_readers(docs) == [("Role", NAMESPACE), ("Role", "team-a"), ("Role", "team-b")]


def test_a_cluster_wide_operator_reads_no_secrets_unless_told(helm_binary: Path, tmp_path: Path) -> None:
    assert _secret_readers(render(helm_binary, tmp_path)) == [("Role", NAMESPACE)]  # ClusterIcebergCatalogs' Secrets
    listed = render(helm_binary, tmp_path, {"rbac": {"secrets": {"namespaces": ["data"]}}})
    assert _secret_readers(listed) == [("Role", "data"), ("Role", NAMESPACE)]
    opted_in = render(helm_binary, tmp_path, {"rbac": {"secrets": {"clusterWide": True}}})
    assert _secret_readers(opted_in) == [("ClusterRole", None)]
    assert _secret_readers(render(helm_binary, tmp_path, {"watchNamespaces": ["a"],
                                                          "rbac": {"secrets": {"create": False}}})) == []


def test_catalog_access_settings_reach_the_operator(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"operator": {
        "catalogTimeout": "4s", "catalogMaxBytes": "1Mi", "maxStuckCatalogReads": 2, "reconcileStuckAfter": "2m",
        "catalogReadMemory": "96Mi", "maxCatalogReads": 8, "maxNamespaceCatalogReads": 2,
        "allowedCatalogUris": ["https://a/", "https://b/"]}})
    settings, _ = settings_from(docs)
    assert (settings.catalog_timeout, settings.allowed_catalog_uris) == (4.0, ("https://a/", "https://b/"))
    assert (settings.catalog_max_bytes, settings.max_stuck_catalog_reads, settings.reconcile_stuck_after) == (
        1024**2, 2, 120.0)
    assert (settings.catalog_read_memory, settings.max_catalog_reads, settings.max_namespace_catalog_reads) == (
        96 * 1024**2, 8, 2)
    default, _ = settings_from(render(helm_binary, tmp_path))
    assert (default.catalog_timeout, default.allowed_catalog_uris, default.allow_local_catalogs) == (10.0, (), False)
    assert (default.catalog_max_bytes, default.catalog_read_memory, default.max_catalog_reads) == (
        4 * 1024**2, 192 * 1024**2, 16)


def test_cluster_scope_with_watched_namespaces_uses_namespaced_peering(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"watchNamespaces": ["team-a"]})
    assert rules_of(one(docs, "ClusterRole", FULLNAME)) == {**OPERATOR_RULES, ("kopf.dev", "kopfpeerings"): PEERING_VERBS}
    assert [p["metadata"]["namespace"] for p in of_kind(docs, "KopfPeering")] == ["team-a"]


def test_namespaced_scope_needs_namespaces(helm_binary: Path, tmp_path: Path) -> None:
    assert "rbac.scope=namespaced needs watchNamespaces" in render_error(
        helm_binary, tmp_path, {"rbac": {"scope": "namespaced"}})
    assert "at '/rbac/scope': value must be one of 'cluster', 'namespaced'" in render_error(helm_binary, tmp_path,
                                                                                          {"rbac": {"scope": "all"}})


def test_service_monitor(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"metrics": {"serviceMonitor": {"enabled": True, "interval": "15s",
                                                                           "labels": {"release": "prom"}}}})
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    service = one(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]


def test_metrics_disabled(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}})
    assert not of_kind(docs, "Service") and not of_kind(docs, "ServiceMonitor")
    settings, _ = settings_from(docs)
    assert settings.metrics_port == 0
    assert "metrics" not in {p["name"] for p in container(docs)["ports"]}


def test_custom_image_resources_and_scheduling(helm_binary: Path, tmp_path: Path) -> None:
    values = {
        "image": {"repository": "registry.example/isync", "tag": "1.2.3", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
        "sparkImage": "registry.example/spark-job:7",
        "sparkVersion": "4.0.1",
        "resources": {"requests": {"cpu": "250m", "memory": "300Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "nodeSelector": {"kubernetes.io/os": "linux", "pool": "ops"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        "extraEnv": [{"name": "AWS_REGION", "value": "eu-west-1"},
                     {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}}],
        "operator": {"logLevel": "DEBUG", "timerInterval": "15s", "backoffBase": 5, "backoffCap": "5m",
                     "stallAfterFailures": 3, "stallThreshold": "10m"},
        "podAnnotations": {"a": "b"},
    }
    docs = render(helm_binary, tmp_path, values)
    cont = container(docs)
    pod = one(docs, "Deployment")["spec"]["template"]
    assert cont["image"] == "registry.example/isync:1.2.3" and cont["imagePullPolicy"] == "Always"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert cont["resources"] == values["resources"]
    assert pod["spec"]["nodeSelector"] == values["nodeSelector"]
    assert pod["spec"]["tolerations"] == values["tolerations"]
    assert pod["spec"]["affinity"] == values["affinity"]
    assert pod["metadata"]["annotations"] == {"a": "b"}
    env = cont["env"]
    assert {"name": "AWS_REGION", "value": "eu-west-1"} in env
    assert {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}} in env
    settings, log_level = settings_from(docs)
    assert settings.default_image == "registry.example/spark-job:7"
    assert log_level == "DEBUG"
    assert (settings.timer_interval, settings.backoff_base, settings.backoff_cap) == (15.0, 5.0, 300.0)
    assert (settings.stall_after_failures, settings.stall_threshold) == (3, 600.0)


def test_spark_image_defaults_to_the_operator_image(helm_binary: Path, tmp_path: Path) -> None:
    settings, _ = settings_from(render(helm_binary, tmp_path, {"image": {"tag": "9.9.9"}}))
    assert settings.default_image == "ghcr.io/icebergsync/icebergsync:9.9.9"


def test_standby_replicas_need_peering(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"replicaCount": 2})
    assert one(docs, "Deployment")["spec"]["replicas"] == 2
    assert settings_from(docs)[0].standalone is False
    assert "replicaCount > 1 needs peering.enabled=true" in render_error(
        helm_binary, tmp_path, {"replicaCount": 2, "peering": {"enabled": False}})


def test_standalone_single_replica_recreates(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"peering": {"enabled": False}})
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert settings_from(docs)[0].standalone is True
    assert not of_kind(docs, "ClusterKopfPeering")
    assert ("kopf.dev", "clusterkopfpeerings") not in rules_of(one(docs, "ClusterRole", FULLNAME))


def test_no_rbac_and_existing_service_account(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"rbac": {"create": False}, "serviceAccount": {"create": False,
                                                                                        "name": "mine"}})
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                                                 "ServiceAccount")]
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "mine"


def test_spark_driver_service_account(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"watchNamespaces": ["team-a", "team-b"],
                                          "sparkJob": {"serviceAccount": {"create": True}}})
    settings, _ = settings_from(docs)
    assert settings.default_service_account == "icebergsync-spark"
    accounts = [d for d in of_kind(docs, "ServiceAccount") if d["metadata"]["name"] == "icebergsync-spark"]
    assert sorted(a["metadata"]["namespace"] for a in accounts) == ["team-a", "team-b"]
    driver_roles = [r for r in of_kind(docs, "Role") if r["metadata"]["name"] == "icebergsync-spark"]
    assert len(driver_roles) == 2
    for role in driver_roles:
        rules = rules_of(role)
        assert set(rules) == {("", "pods"), ("", "services"), ("", "configmaps"), ("", "persistentvolumeclaims")}
        assert all({"create", "get", "list", "watch", "delete"} <= verbs for verbs in rules.values())
    for binding in (b for b in of_kind(docs, "RoleBinding") if b["metadata"]["name"] == "icebergsync-spark"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "icebergsync-spark",
                                        "namespace": binding["metadata"]["namespace"]}]


def test_spark_driver_service_account_cluster_wide_goes_to_the_release_namespace(helm_binary: Path,
                                                                                  tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path, {"sparkJob": {"serviceAccount": {"create": True}}})
    driver = [d for d in of_kind(docs, "ServiceAccount") if d["metadata"]["name"] == "icebergsync-spark"]
    assert [d["metadata"]["namespace"] for d in driver] == [NAMESPACE]
    docs = render(helm_binary, tmp_path, {"sparkJob": {"serviceAccount": {"create": True}, "namespaces": ["jobs"]}})
    driver = [d for d in of_kind(docs, "ServiceAccount") if d["metadata"]["name"] == "icebergsync-spark"]
    assert [d["metadata"]["namespace"] for d in driver] == ["jobs"]



def test_policy_values_reach_the_operator(helm_binary: Path, tmp_path: Path) -> None:
    """The chart's defaults are the operator's closed defaults; each value reaches the operator."""
    default, _ = settings_from(render(helm_binary, tmp_path))
    assert default.allowed_spark_conf == DEFAULT_ALLOWED_SPARK_CONF
    assert (default.allowed_images, default.allowed_service_accounts) == ((), ())
    assert (default.max_executors, default.max_cores, default.max_memory) == (8, 16, 64 * 1024**3)
    docs = render(helm_binary, tmp_path, {"policy": {
        "allowedImages": ["registry.example/data/"], "allowedServiceAccounts": ["icebergsync-spark"],
        "allowedSparkConf": ["spark.sql.*"], "maxExecutors": 0, "maxCores": 4, "maxMemory": "8Gi"}})
    settings, _ = settings_from(docs)
    assert settings.allowed_images == ("registry.example/data/",)
    assert settings.allowed_service_accounts == ("icebergsync-spark",)
    assert settings.allowed_spark_conf == ("spark.sql.*",)
    assert (settings.max_executors, settings.max_cores, settings.max_memory) == (0, 4, 8 * 1024**3)
    closed, _ = settings_from(render(helm_binary, tmp_path, {"policy": {"allowedSparkConf": []}}))
    assert closed.allowed_spark_conf == ()


def test_network_policy_admits_only_the_metrics_port(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path)
    policy = one(docs, "NetworkPolicy")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]
    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    scoped = one(render(helm_binary, tmp_path, {"networkPolicy": {"metricsFrom": monitoring}}), "NetworkPolicy")
    assert scoped["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}], "from": monitoring}]
    closed = one(render(helm_binary, tmp_path, {"metrics": {"enabled": False}}), "NetworkPolicy")
    assert closed["spec"]["ingress"] is None or closed["spec"]["ingress"] == []
    assert not of_kind(render(helm_binary, tmp_path, {"networkPolicy": {"enabled": False}}), "NetworkPolicy")


def test_network_policy_can_restrict_the_operators_egress(helm_binary: Path, tmp_path: Path) -> None:
    """Off by default; on, only the API server, DNS and the declared catalogs (docs/security.md)."""
    assert "egress" not in one(render(helm_binary, tmp_path), "NetworkPolicy")["spec"]
    api_server = [{"ipBlock": {"cidr": "10.96.0.1/32"}}, {"ipBlock": {"cidr": "192.168.1.10/32"}}]
    catalog = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "data"}},
                       "podSelector": {"matchLabels": {"app": "rest"}}}], "ports": [{"port": 8181, "protocol": "TCP"}]}
    policy = one(render(helm_binary, tmp_path, {"networkPolicy": {"egress": {
        "enabled": True, "apiServer": api_server, "catalogs": [catalog]}}}), "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    dns = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                   "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
           "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
    assert policy["egress"] == [
        {"to": api_server, "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]},
        dns, catalog]
    assert "egress.apiServer" in render_error(helm_binary, tmp_path, {"networkPolicy": {"egress": {"enabled": True}}})


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    """The dotted paths of every key the values schema declares (objects with declared properties only)."""
    paths = set()
    for key, child in schema.get("properties", {}).items():
        paths.add(prefix + key)
        paths |= _schema_paths(child, f"{prefix}{key}.")
    return paths


def _value_paths(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> set[str]:
    """The dotted paths of values.yaml's keys, down to where the schema stops declaring properties."""
    paths = set()
    for key, value in values.items():
        paths.add(prefix + key)
        child = schema.get("properties", {}).get(key, {})
        if isinstance(value, dict) and "properties" in child:
            paths |= _value_paths(value, child, f"{prefix}{key}.")
    return paths


def test_the_values_schema_declares_every_value_and_closes_every_object() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert _value_paths(values, schema) == _schema_paths(schema)

    def closed(node: dict[str, Any], where: str) -> None:
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{where or 'values'} accepts unknown keys"
            for key, child in node["properties"].items():
                closed(child, f"{where}.{key}".lstrip("."))

    closed(schema, "")


@pytest.mark.parametrize(("values", "says"), [
    ({"watchNamespace": ["data"]}, "watchNamespace"),  # a typo of watchNamespaces
    ({"watchNamespaces": "data"}, "watchNamespaces"),  # --set watchNamespaces=data: a string, not a list
    ({"replicaCount": "two"}, "replicaCount"),
    ({"operator": {"logLevel": "LOUD"}}, "logLevel"),
    ({"operator": {"timerInterval": "30 seconds"}}, "timerInterval"),
    ({"rbac": {"secrets": {"namespace": ["data"]}}}, "namespace"),
    ({"policy": {"maxMemory": "lots"}}, "maxMemory"),
])
def test_a_wrong_value_fails_the_render_naming_it(helm_binary: Path, tmp_path: Path, values: dict[str, Any],
                                                  says: str) -> None:
    assert says in render_error(helm_binary, tmp_path, values)


def test_the_operator_has_a_disruption_budget_that_never_blocks_a_drain_of_one(helm_binary: Path,
                                                                               tmp_path: Path) -> None:
    budget = one(render(helm_binary, tmp_path), "PodDisruptionBudget")
    deployment = one(render(helm_binary, tmp_path), "Deployment")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert not of_kind(render(helm_binary, tmp_path, {"podDisruptionBudget": {"enabled": False}}), "PodDisruptionBudget")
