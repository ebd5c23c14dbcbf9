"""The Helm chart against the suite's real kube-apiserver (RBAC enforced): install, upgrade, uninstall.

There is no controller-manager or kubelet, so the Deployment never gets a pod; what is checked is
the objects Helm creates and what the RBAC really grants: SubjectAccessReviews for the operator's
ServiceAccount, and the real operator run under that ServiceAccount's own token, reconciling an
IcebergSync into a SparkApplication with no permission error.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.conftest import mounted_spec_configmap, wait_for
from tests.infra.kube import KubeCluster, _write_kubeconfig, apply_crd

REPO_ROOT = Path(__file__).resolve().parents[2]
# An HTTP 403 or a refusal in the operator's log; a timestamp's milliseconds (",403") are not one.
PERMISSION_PROBLEM = re.compile(r"(?<![,\d])403(?!\d)|[Ff]orbidden|Not enough permissions")
CHART = REPO_ROOT / "charts" / "icebergsync"
CRDS = ("icebergsyncs.icebergsync.io", "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev")


def helm(cluster: KubeCluster, *args: str) -> str:
    proc = subprocess.run([str(cluster.tools.helm), *args], env=cluster.env, capture_output=True, text=True,
                          timeout=300, check=False)
    if proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}\n{proc.stdout}")
    return proc.stdout


def create_namespace(api: client.ApiClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def exists(read: Callable[..., Any], *args: str) -> bool:
    try:
        read(*args)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def allowed(api: client.ApiClient, user: str, verb: str, resource: str, namespace: str | None = None,
            group: str = "", subresource: str = "") -> bool:
    """The API server's RBAC decision for ``user`` (a SubjectAccessReview, as the admin)."""
    namespace_of_sa = user.split(":")[2]
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=user, groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace_of_sa}", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(
            verb=verb, group=group, resource=resource, subresource=subresource or None, namespace=namespace)))
    result = client.AuthorizationV1Api(api).create_subject_access_review(review)
    return bool(result.status.allowed)


@pytest.fixture
def admin(kube_cluster: KubeCluster) -> Iterator[client.ApiClient]:
    with kube_cluster.api_client() as api:
        yield api


# ------------------------------------------------------------------------------------------------
# cluster-wide release: install, RBAC decisions, upgrade, uninstall
# ------------------------------------------------------------------------------------------------


def test_install_upgrade_uninstall_cluster_wide(kube_cluster: KubeCluster, admin: client.ApiClient) -> None:
    release = f"isync-{uuid.uuid4().hex[:5]}"
    fullname = f"{release}-icebergsync"
    namespace = create_namespace(admin, "helm")
    apps, core, rbac = client.AppsV1Api(admin), client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    ext = client.ApiextensionsV1Api(admin)

    out = helm(kube_cluster, "install", release, str(CHART), "--namespace", namespace)
    # NOTES.txt: the next steps, naming an example that exists.
    notes = out.split("NOTES:", 1)[1]
    assert "kubectl get isync" in notes and "Spark Operator" in notes
    example = notes.split("-f examples/", 1)[1].split()[0]
    assert (REPO_ROOT / "examples" / example).is_file()

    # CRDs from crds/ are installed and established.
    for name in CRDS:
        conditions = {c.type: c.status for c in ext.read_custom_resource_definition(name).status.conditions or []}
        assert conditions.get("Established") == "True", name
    # The operator's Deployment: one replica of the chart's image.
    deployment = apps.read_namespaced_deployment(fullname, namespace)
    assert deployment.spec.replicas == 1
    pod = deployment.spec.template.spec
    assert pod.service_account_name == fullname
    assert pod.containers[0].image == "ghcr.io/icebergsync/icebergsync:0.1.0"
    assert pod.containers[0].security_context.read_only_root_filesystem is True
    assert pod.containers[0].liveness_probe.http_get.path == "/healthz"
    assert core.read_namespaced_service_account(fullname, namespace).metadata.name == fullname
    assert core.read_namespaced_service(f"{fullname}-metrics", namespace).spec.ports[0].port == 9090
    role = rbac.read_cluster_role(fullname)
    assert {rule.api_groups[0] for rule in role.rules} == {"icebergsync.io", "sparkoperator.k8s.io", "", "kopf.dev"}
    binding = rbac.read_cluster_role_binding(fullname)
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [("ServiceAccount", fullname, namespace)]
    assert exists(client.CustomObjectsApi(admin).get_cluster_custom_object, "kopf.dev", "v1",
                  "clusterkopfpeerings", "icebergsync")

    # What the RBAC really grants the operator's ServiceAccount, in any namespace.
    sa = f"system:serviceaccount:{namespace}:{fullname}"
    anywhere = create_namespace(admin, "apps")
    for verb in ("create", "delete", "list", "watch"):
        assert allowed(admin, sa, verb, "sparkapplications", anywhere, group="sparkoperator.k8s.io"), verb
    for verb in ("get", "list", "watch", "patch"):
        assert allowed(admin, sa, verb, "icebergsyncs", anywhere, group="icebergsync.io"), verb
    assert allowed(admin, sa, "patch", "icebergsyncs", anywhere, group="icebergsync.io", subresource="status")
    assert allowed(admin, sa, "create", "configmaps", anywhere)
    # Secrets: a cluster-wide operator reads none unless rbac.secrets names namespaces or opts in cluster-wide.
    assert not allowed(admin, sa, "get", "secrets", anywhere)
    assert allowed(admin, sa, "create", "events", anywhere)
    assert allowed(admin, sa, "patch", "clusterkopfpeerings", group="kopf.dev")
    assert allowed(admin, sa, "watch", "customresourcedefinitions", group="apiextensions.k8s.io")
    # ... and nothing it does not use.
    assert not allowed(admin, sa, "list", "secrets", anywhere)
    assert not allowed(admin, sa, "create", "pods", anywhere)
    assert not allowed(admin, sa, "update", "configmaps", anywhere)
    assert not allowed(admin, sa, "delete", "icebergsyncs", anywhere, group="icebergsync.io")
    assert not allowed(admin, sa, "create", "icebergsyncs", anywhere, group="icebergsync.io")
    assert not allowed(admin, sa, "patch", "sparkapplications", anywhere, group="sparkoperator.k8s.io")
    assert not allowed(admin, sa, "create", "clusterroles", group="rbac.authorization.k8s.io")

    # Upgrade: a changed value reaches the Deployment.
    helm(kube_cluster, "upgrade", release, str(CHART), "--namespace", namespace, "--reuse-values",
         "--set", "image.tag=0.1.1", "--set", "operator.logLevel=DEBUG", "--set", "replicaCount=2")
    deployment = apps.read_namespaced_deployment(fullname, namespace)
    assert deployment.spec.replicas == 2
    container = deployment.spec.template.spec.containers[0]
    assert container.image == "ghcr.io/icebergsync/icebergsync:0.1.1"
    env = {e.name: e.value for e in container.env}
    assert env["ICEBERGSYNC_LOG_LEVEL"] == "DEBUG"
    assert env["ICEBERGSYNC_DEFAULT_IMAGE"] == "ghcr.io/icebergsync/icebergsync:0.1.1"
    assert env["ICEBERGSYNC_STANDALONE"] == "false"
    history = yaml.safe_load(helm(kube_cluster, "history", release, "--namespace", namespace, "-o", "yaml"))
    assert [entry["revision"] for entry in history] == [1, 2]

    # Uninstall: the release's objects are gone, the CRDs stay (Helm never deletes crds/).
    helm(kube_cluster, "uninstall", release, "--namespace", namespace, "--wait")
    assert not exists(apps.read_namespaced_deployment, fullname, namespace)
    assert not exists(core.read_namespaced_service_account, fullname, namespace)
    assert not exists(core.read_namespaced_service, f"{fullname}-metrics", namespace)
    assert not exists(rbac.read_cluster_role, fullname)
    assert not exists(rbac.read_cluster_role_binding, fullname)
    assert not exists(rbac.read_cluster_role, f"{fullname}-observe")
    for name in CRDS:
        assert exists(ext.read_custom_resource_definition, name), name
    assert not allowed(admin, sa, "create", "sparkapplications", anywhere, group="sparkoperator.k8s.io")


# ------------------------------------------------------------------------------------------------
# namespaced release: Roles per namespace, and the real operator under the ServiceAccount's token
# ------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> bool:
    if process.poll() is not None:
        pytest.fail(f"operator exited with {process.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError):
        return False


@contextlib.contextmanager
def operator_as(kubeconfig: Path, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``icebergsync-operator`` with the chart's environment, authenticated by ``kubeconfig`` only."""
    health = _free_port()
    run_env = {**{k: v for k, v in os.environ.items() if not k.startswith("ICEBERGSYNC_")}, **env,
               "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1",
               "ICEBERGSYNC_METRICS_ADDRESS": "127.0.0.1", "ICEBERGSYNC_METRICS_PORT": str(_free_port()),
               "ICEBERGSYNC_LIVENESS_ENDPOINT": f"http://127.0.0.1:{health}/healthz",
               "ICEBERGSYNC_TIMER_INTERVAL": "1",
               # The test's lake is a local SQLite file: an operator run outside a cluster may open it.
               "ICEBERGSYNC_ALLOW_LOCAL_CATALOGS": "true"}
    with open(log, "ab") as out:
        process = subprocess.Popen(["timeout", "--kill-after=10", "600", sys.executable, "-m",
                                    "icebergsync_operator.main"], cwd=REPO_ROOT, env=run_env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for("operator liveness", lambda: _healthy(f"http://127.0.0.1:{health}/healthz", process, log))
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def test_namespaced_release_runs_the_operator_under_its_own_service_account(
        kube_cluster: KubeCluster, admin: client.ApiClient, tmp_path: Path) -> None:
    release = f"isync-{uuid.uuid4().hex[:5]}"
    fullname = f"{release}-icebergsync"
    namespace = create_namespace(admin, "helm")
    watched, other = create_namespace(admin, "team"), create_namespace(admin, "other")
    core, custom, rbac = client.CoreV1Api(admin), client.CustomObjectsApi(admin), client.RbacAuthorizationV1Api(admin)

    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "watchNamespaces": [watched], "rbac": {"scope": "namespaced"},
        "sparkJob": {"serviceAccount": {"create": True}},
    }))
    helm(kube_cluster, "install", release, str(CHART), "--namespace", namespace, "-f", str(values))

    # One Role + RoleBinding in the watched namespace, none elsewhere; no cluster-wide grant of them.
    assert rbac.read_namespaced_role(fullname, watched).rules
    assert not exists(rbac.read_namespaced_role, fullname, other)
    assert not exists(rbac.read_cluster_role, fullname)
    assert exists(custom.get_namespaced_custom_object, "kopf.dev", "v1", watched, "kopfpeerings", "icebergsync")
    # The Spark driver's ServiceAccount and Role in the watched namespace.
    assert core.read_namespaced_service_account("icebergsync-spark", watched)
    driver = f"system:serviceaccount:{watched}:icebergsync-spark"
    assert allowed(admin, driver, "create", "pods", watched)
    assert allowed(admin, driver, "delete", "services", watched)
    assert not allowed(admin, driver, "create", "pods", other)

    sa = f"system:serviceaccount:{namespace}:{fullname}"
    assert allowed(admin, sa, "create", "sparkapplications", watched, group="sparkoperator.k8s.io")
    assert allowed(admin, sa, "patch", "icebergsyncs", watched, group="icebergsync.io", subresource="status")
    assert not allowed(admin, sa, "create", "sparkapplications", other, group="sparkoperator.k8s.io")
    assert allowed(admin, sa, "get", "secrets", watched)
    assert not allowed(admin, sa, "get", "secrets", other)
    # Its own namespace holds the Secrets ClusterIcebergCatalogs name (catalogs.secretsNamespace).
    assert allowed(admin, sa, "get", "secrets", namespace)
    assert allowed(admin, sa, "watch", "icebergcatalogs", watched, group="icebergsync.io")
    assert not allowed(admin, sa, "watch", "icebergcatalogs", other, group="icebergsync.io")
    assert allowed(admin, sa, "watch", "clustericebergcatalogs", group="icebergsync.io")
    assert allowed(admin, sa, "patch", "clustericebergcatalogs", group="icebergsync.io", subresource="status")

    # The real operator, with the Deployment's environment and a token of its ServiceAccount: it
    # starts (peering, CRD scan), launches a SparkApplication, writes status and events, reads the
    # secret, and cleans up on delete -- any missing permission would surface as a 403 below.
    token = core.create_namespaced_service_account_token(
        fullname, namespace, client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))).status.token
    kubeconfig = tmp_path / "operator-kubeconfig"
    _write_kubeconfig(kubeconfig, kube_cluster.server, kube_cluster.ca_file, "operator", {"token": token})
    deployment = client.AppsV1Api(admin).read_namespaced_deployment(fullname, namespace)
    env = {e.name: e.value for e in deployment.spec.template.spec.containers[0].env if e.value is not None}
    assert env["ICEBERGSYNC_NAMESPACES"] == watched
    assert env["ICEBERGSYNC_DEFAULT_SERVICE_ACCOUNT"] == "icebergsync-spark"

    core.create_namespaced_secret(watched, client.V1Secret(
        metadata=client.V1ObjectMeta(name="catalog-creds"), string_data={"token": "t0ken"}))
    custom.create_namespaced_custom_object("icebergsync.io", "v1alpha1", watched, "icebergcatalogs", {
        "apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergCatalog", "metadata": {"name": "lake"},
        "spec": {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": str(tmp_path / "warehouse"),
                 "secretRef": {"name": "catalog-creds"}}})
    spec = {
        "source": {"generator": {"rowsPerSecond": 10, "totalRows": 10}},
        "table": {"name": "db.trips", "catalogRef": {"name": "lake"}},
    }
    custom.create_namespaced_custom_object("icebergsync.io", "v1alpha1", watched, "icebergsyncs", {
        "apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "metadata": {"name": "trips"}, "spec": spec})

    log = tmp_path / "operator.log"
    with operator_as(kubeconfig, env, log):
        def application() -> dict[str, Any] | None:
            items = custom.list_namespaced_custom_object("sparkoperator.k8s.io", "v1beta2", watched,
                                                         "sparkapplications")["items"]
            return items[0] if items else None

        app = wait_for("the SparkApplication", application)
        assert app["metadata"]["name"] == "trips-v1"
        assert app["spec"]["image"] == "ghcr.io/icebergsync/icebergsync:0.1.0"
        assert app["spec"]["mainApplicationFile"] == "local:///opt/icebergsync/spark_app/main.py"
        assert app["spec"]["driver"]["serviceAccount"] == "icebergsync-spark"
        spec_configmap = mounted_spec_configmap(app)
        assert exists(core.read_namespaced_config_map, spec_configmap, watched)

        def status() -> dict[str, Any] | None:
            body = custom.get_namespaced_custom_object("icebergsync.io", "v1alpha1", watched, "icebergsyncs", "trips")
            return body.get("status") if body.get("status", {}).get("sinkVersion") == 1 else None

        assert wait_for("status written by the operator", status)["application"] == "trips-v1"
        wait_for("an event on the sync", lambda: [
            e for e in core.list_namespaced_event(watched).items if e.involved_object.name == "trips"] or None)

        # Delete: the operator's finalizer deletes the application and its ConfigMap, then lets go.
        custom.delete_namespaced_custom_object("icebergsync.io", "v1alpha1", watched, "icebergsyncs", "trips")
        wait_for("the sync to be gone", lambda: not exists(
            custom.get_namespaced_custom_object, "icebergsync.io", "v1alpha1", watched, "icebergsyncs", "trips"))
        assert application() is None
        assert not exists(core.read_namespaced_config_map, spec_configmap, watched)

    text = log.read_text(errors="replace")
    assert not PERMISSION_PROBLEM.search(text), f"permission problem in the operator log:\n{text[-4000:]}"

    helm(kube_cluster, "uninstall", release, "--namespace", namespace, "--wait")
    assert not exists(rbac.read_namespaced_role, fullname, watched)
    assert not exists(core.read_namespaced_service_account, "icebergsync-spark", watched)
    assert not exists(custom.get_namespaced_custom_object, "kopf.dev", "v1", watched, "kopfpeerings", "icebergsync")


# ------------------------------------------------------------------------------------------------
# examples: accepted by the real API server with the real CRD (dry run, strict field validation)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("example", sorted((REPO_ROOT / "examples").glob("**/*.yaml")),
                         ids=lambda p: p.relative_to(REPO_ROOT / "examples").as_posix())
def test_example_is_accepted_by_the_api_server(kube_cluster: KubeCluster, admin: client.ApiClient,
                                               example: Path) -> None:
    for crd in ("icebergsync.yaml", "icebergcatalog.yaml"):
        apply_crd(kube_cluster, REPO_ROOT / "crds" / crd)
    namespace = create_namespace(admin, "example")
    core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    kinds = []
    for document in (doc for doc in yaml.safe_load_all(example.read_text()) if doc):
        document["metadata"].pop("namespace", None)  # as `kubectl apply -n <namespace>` does
        kinds.append(document["kind"])
        if document["kind"] == "Secret":
            core.create_namespaced_secret(namespace, document, dry_run="All", field_validation="Strict")
        else:
            plural = {"IcebergSync": "icebergsyncs", "IcebergCatalog": "icebergcatalogs"}[document["kind"]]
            created = custom.create_namespaced_custom_object(
                "icebergsync.io", "v1alpha1", namespace, plural, document, dry_run="All", field_validation="Strict")
            assert created["metadata"]["name"] == document["metadata"]["name"]
    assert "IcebergSync" in kinds
