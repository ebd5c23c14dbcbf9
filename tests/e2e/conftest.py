"""Fixtures of the operator e2e tests: the CRDs on the real test API server, a fresh namespace per
test, the operator run for real as a subprocess (bounded lifetime, stopped after the test), a
client helper that waits with timeouts, and the Spark Operator stand-in."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client

from tests.e2e.spark_operator_standin import SparkOperatorStandIn, set_application_state
from tests.infra.kube import KubeCluster, apply_crd

REPO_ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "icebergsync.io", "v1alpha1", "icebergsyncs"
SPARK = ("sparkoperator.k8s.io", "v1beta2")
OPERATOR_MAX_SECONDS = 900
WAIT_SECONDS = 60.0
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT_SECONDS, interval: float = 0.2) -> T:
    """Poll ``probe`` until it returns neither None nor False; fail after ``timeout`` seconds saying what."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except Exception as error:
            last = f"{type(error).__name__}: {error}"
        else:
            if last is not None and last is not False:
                return last
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def mounted_spec_configmap(application: dict[str, Any]) -> str:
    """The spec ConfigMap that a rendered SparkApplication's driver pod template mounts."""
    [volume] = [v for v in application["spec"]["driver"]["template"]["spec"]["volumes"] if "configMap" in v]
    return str(volume["configMap"]["name"])


@dataclass
class Kube:
    """The test's view of one namespace: IcebergSyncs, SparkApplications, ConfigMaps, events."""

    api_client: client.ApiClient
    namespace: str

    def __post_init__(self) -> None:
        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)

    def create_sync(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "IcebergSync", "metadata": {"name": name}, "spec": spec}
        return dict(self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body,
                                                                field_validation="Strict"))

    def get_sync(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name))
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec})

    def delete_sync(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def status(self, name: str) -> dict[str, Any]:
        return dict((self.get_sync(name) or {}).get("status") or {})

    def condition(self, name: str, kind: str) -> tuple[str, str] | None:
        found = [c for c in self.status(name).get("conditions", []) if c["type"] == kind]
        return (found[0]["status"], found[0]["reason"]) if found else None

    def applications(self) -> dict[str, dict[str, Any]]:
        items = self.custom.list_namespaced_custom_object(*SPARK, self.namespace, "sparkapplications")["items"]
        return {item["metadata"]["name"]: item for item in items}

    def configmaps(self) -> dict[str, client.V1ConfigMap]:
        return {item.metadata.name: item for item in self.core.list_namespaced_config_map(self.namespace).items}

    def set_state(self, application: str, state: str, error: str = "") -> None:
        set_application_state(self.custom, self.namespace, application, state, error)

    def events(self, name: str) -> list[tuple[str, str]]:
        items = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}").items
        return [(event.type, event.reason) for event in sorted(items, key=lambda e: int(e.metadata.resource_version))]

    def event_reasons(self, name: str) -> list[str]:
        return [reason for _, reason in self.events(name)]

    def wait_status(self, name: str, what: str, check: Callable[[dict[str, Any]], bool],
                    timeout: float = WAIT_SECONDS) -> dict[str, Any]:
        return wait_for(f"{name}: {what}", lambda: (lambda s: s if check(s) else None)(self.status(name)), timeout)

    def wait_applications(self, names: set[str], timeout: float = WAIT_SECONDS) -> dict[str, dict[str, Any]]:
        return wait_for(f"applications {sorted(names)}", lambda: (lambda apps: apps if set(apps) == names else None)(
            self.applications()), timeout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class OperatorProcess:
    """``icebergsync-operator`` in a subprocess (bounded lifetime) with its log, health and metrics URLs."""

    command: tuple[str, ...]  #: the operator's argv
    env: dict[str, str]
    log_path: Path
    health_url: str  #: its liveness endpoint (kopf's)
    metrics_url: str  #: its Prometheus endpoint
    cwd: Path = REPO_ROOT
    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def local(cls, namespaces: str, env: dict[str, str], log_path: Path,
              extra_args: tuple[str, ...] = ()) -> OperatorProcess:
        """The operator watching ``namespaces`` (comma-separated), its endpoints on free loopback ports."""
        metrics, health = _free_port(), _free_port()
        command = (sys.executable, "-m", "icebergsync_operator.main", "--namespaces", namespaces,
                   "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics),
                   "--liveness-endpoint", f"http://127.0.0.1:{health}/healthz", *extra_args)
        return cls(command, env, log_path, f"http://127.0.0.1:{health}/healthz", f"http://127.0.0.1:{metrics}/metrics")

    def start(self) -> OperatorProcess:
        args = ["timeout", "--kill-after=10", str(OPERATOR_MAX_SECONDS), *self.command]
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(args, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        wait_for(f"operator liveness at {self.health_url}", self._healthy, timeout=60)
        return self

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"operator exited with {self.process.returncode}:\n{self.log()[-3000:]}")
        return self.liveness() == 200

    def liveness(self) -> int | None:
        """The HTTP status of the liveness endpoint; None when it does not answer."""
        try:
            with urllib.request.urlopen(self.health_url, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_logged(self, text: str, what: str) -> None:
        """Wait until the log holds ``text``; a timeout fails with the log's tail, which tells why."""
        try:
            wait_for(what, lambda: text in self.log())
        except pytest.fail.Exception as timeout:
            pytest.fail(f"{timeout}\noperator log ({self.log_path.name}):\n{self.log()[-4000:]}")

    def metrics(self) -> dict[str, float]:
        """The Prometheus samples, e.g. ``icebergsync_operator_launches_total{reason="Launched"}``."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            text = response.read().decode()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                samples[key] = float(value)
        return samples

    def reconciles(self) -> float:
        return self.metrics().get('icebergsync_operator_reconciles_total{result="ok"}', 0.0)

    def wait_reconciles(self, more: int) -> None:
        """Wait until this operator has completed ``more`` further reconciles (timer ticks included)."""
        target = self.reconciles() + more
        wait_for(f"{more} more reconciles", lambda: self.reconciles() >= target)


@pytest.fixture(scope="session")
def operator_crds(kube_cluster: KubeCluster) -> KubeCluster:
    """The IcebergSync and catalog CRDs and kopf's peering CRDs, installed once per session."""
    for name in ("icebergsync.yaml", "icebergcatalog.yaml", "clustericebergcatalog.yaml"):
        apply_crd(kube_cluster, REPO_ROOT / "crds" / name)
    apply_crd(kube_cluster, REPO_ROOT / "crds" / "kopf-peering.yaml")
    return kube_cluster


@pytest.fixture
def kube(operator_crds: KubeCluster) -> Iterator[Kube]:
    """A fresh namespace (never deleted: nothing would finalize it) and a client for it."""
    namespace = f"e2e-{uuid.uuid4().hex[:8]}"
    with operator_crds.api_client() as api_client:
        client.CoreV1Api(api_client).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        yield Kube(api_client, namespace)


@pytest.fixture
def other_kube(kube: Kube) -> Kube:
    """A second fresh namespace (never deleted either), on the same client."""
    namespace = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    return Kube(kube.api_client, namespace)


@pytest.fixture
def cluster_catalogs(kube: Kube) -> Iterator[Callable[[dict[str, Any]], str]]:
    """Create ClusterIcebergCatalogs under unique names; each is deleted after the test."""
    created: list[str] = []

    def create(spec: dict[str, Any]) -> str:
        name = f"lake-{uuid.uuid4().hex[:8]}"
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterIcebergCatalog", "metadata": {"name": name},
                "spec": spec}
        kube.custom.create_cluster_custom_object(GROUP, VERSION, "clustericebergcatalogs", body)
        created.append(name)
        return name

    yield create
    for name in created:
        kube.custom.delete_cluster_custom_object(GROUP, VERSION, "clustericebergcatalogs", name)


@pytest.fixture
def start_operator(operator_crds: KubeCluster, kube: Kube, tmp_path: Path) -> Iterator[Callable[..., OperatorProcess]]:
    """Start operators watching the test's namespace (and ``watch``); every one is stopped after the test.

    Defaults are fast: a 1 s timer and a 1 s backoff base (capped at 2 s); inline and local catalogs are allowed
    (most tests declare a local SQLite catalog inline, as on a workstation; ``--no-allow-inline-catalogs`` and
    ``--no-allow-local-catalogs`` restore the defaults).
    """
    started: list[OperatorProcess] = []
    env = {**operator_crds.env, "PYTHONUNBUFFERED": "1"}

    def start(*args: str, watch: tuple[str, ...] = ()) -> OperatorProcess:
        defaults = ("--timer-interval", "1", "--backoff-base", "1", "--backoff-cap", "2", "--stall-threshold", "120",
                    "--allow-inline-catalogs", "--allow-local-catalogs")
        operator = OperatorProcess.local(",".join((kube.namespace, *watch)), env,
                                         tmp_path / f"operator-{len(started)}.log", (*defaults, *args))
        started.append(operator)
        return operator.start()

    yield start
    for operator in started:
        operator.stop()


@pytest.fixture
def spark_operator_standin(kube: Kube, tmp_path: Path) -> Iterator[Callable[..., SparkOperatorStandIn]]:
    """Start the Spark Operator stand-in for the test's namespace (stopped, jobs killed, after the test)."""
    standins: list[SparkOperatorStandIn] = []

    def start(**options: Any) -> SparkOperatorStandIn:
        standin = SparkOperatorStandIn(kube.api_client, kube.namespace, tmp_path / "spark", **options)
        standin.work_dir.mkdir(parents=True, exist_ok=True)
        standins.append(standin.start())
        return standin

    yield start
    for standin in standins:
        standin.stop()


@pytest.fixture
def warehouse(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A local SQLite catalog and warehouse reachable by the jobs and the operator."""
    root = tmp_path / "lake"
    root.mkdir()
    yield {"uri": f"sqlite:///{root / 'catalog.db'}", "warehouse": str(root / "warehouse")}
    shutil.rmtree(root, ignore_errors=True)


# --- tenants: users acting by impersonation, with the tenant role in their own namespace ----------

TENANT_CORE = "icebergsync-tenant-core"
_CRUD = ["create", "get", "list", "watch", "update", "patch", "delete"]
#: What Kubernetes' built-in ``admin`` role gives a tenant besides the chart's rights: Secrets to create (not
#: read), ConfigMaps. On a real cluster a tenant is bound to ``admin`` (or ``edit``), into which the chart's
#: tenant ClusterRoles aggregate; the test API server runs no kube-controller-manager, so nothing aggregates
#: there (the built-in roles have no rules at all): the chart's role is bound directly, and these beside it.
TENANT_CORE_RULES = [
    client.V1PolicyRule(api_groups=[""], resources=["secrets"], verbs=["create"]),
    client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=_CRUD),
]


def grant_tenant(api_client: client.ApiClient, namespace: str, user: str, chart_role: str) -> None:
    """Bind ``user`` in ``namespace`` to the chart's tenant ClusterRole ``chart_role`` and to
    ``TENANT_CORE_RULES``: the one place a tenant's rights come from."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    subject = client.RbacV1Subject(api_group="rbac.authorization.k8s.io", kind="User", name=user)
    rbac.create_namespaced_role(namespace, client.V1Role(metadata=client.V1ObjectMeta(name=TENANT_CORE),
                                                         rules=TENANT_CORE_RULES))
    for kind, role in (("Role", TENANT_CORE), ("ClusterRole", chart_role)):
        rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=f"tenant-{role}"), subjects=[subject],
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind=kind, name=role)))


@dataclass
class Tenant:
    """A tenant in a namespace of their own: ``kube`` acts as them, ``admin`` is the cluster admin's view."""

    user: str
    kube: Kube
    admin: Kube

    @property
    def namespace(self) -> str:
        return self.kube.namespace


@pytest.fixture
def tenants(kube_cluster: KubeCluster, tenant_role: str) -> Iterator[Callable[[], Tenant]]:
    """Make tenants: each a fresh namespace and user, bound by ``grant_tenant`` to the chart's ``tenant_role``
    (a fixture of the module: the role of the chart it applied), acting by impersonation."""
    clients: list[client.ApiClient] = []

    def new_tenant() -> Tenant:
        user = f"tenant-{uuid.uuid4().hex[:8]}"
        admin, acting = kube_cluster.api_client(), kube_cluster.api_client()
        clients.extend((admin, acting))
        client.CoreV1Api(admin).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=user)))
        grant_tenant(admin, user, user, tenant_role)
        acting.set_default_header("Impersonate-User", user)
        return Tenant(user, Kube(acting, user), Kube(admin, user))

    yield new_tenant
    for api_client in clients:
        api_client.close()
