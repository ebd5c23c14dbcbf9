"""Kubernetes test fixtures: a real etcd + kube-apiserver on 127.0.0.1, the real ``helm`` binary
and the Kubeflow Spark Operator CRDs (``SparkApplication``, ``ScheduledSparkApplication``,
``SparkConnect``); the Spark Operator controller itself is run by ``tests.infra.spark_operator``.

The binaries are built from source through the Go module proxy by ``scripts/infra/kube-tools.sh``
(cached under ``$ICEBERGSYNC_CACHE``, default ``~/.cache/icebergsync``); the fixture runs that
script first, so a cold machine pays the build once (see docs/testing-infra-kube.md).

What the cluster is -- and is not:

* Only etcd and kube-apiserver run. There is **no kube-controller-manager, scheduler or kubelet**:

  - Pods are stored but never scheduled or run; Deployments/Jobs never create Pods.
  - Namespaces are not finalized: deleting one leaves it ``Terminating`` forever (its objects
    are not removed). Use a fresh, uniquely named namespace per test instead of deleting.
  - Garbage collection does not happen: objects with ``ownerReferences`` to a deleted owner are
    *not* deleted, and ``foreground``/``background`` propagation never completes. Tests of
    owner references can only assert that the references are set correctly.
  - Aggregated ClusterRoles (``edit``, ``view``, ``admin``) have no rules: aggregation is a
    controller-manager controller. Bind explicit rules instead.
  - No ``default`` ServiceAccount and no ``kube-root-ca.crt`` ConfigMap appear in new namespaces
    (controller-manager creates those). The ServiceAccount admission plugin is on, so creating a
    Pod whose ServiceAccount (``default`` if unset) does not exist is rejected: create the
    ServiceAccount first. Namespaces ``default``, ``kube-system``, ``kube-public`` and
    ``kube-node-lease`` exist up front (the apiserver makes them).

* ``--authorization-mode=RBAC``: RBAC objects (Roles, ClusterRoles, bindings) are really
  enforced. The admin user (client certificate ``CN=icebergsync-admin, O=system:masters``, also
  static token ``KubeCluster.token``) is in ``system:masters`` and may do anything.
  ``KubeCluster.make_user_kubeconfig`` writes a kubeconfig for another (token) user so that RBAC
  can be tested from the outside, e.g. with Helm.

* The cluster is one per pytest session (fixture ``kube_cluster``). Its processes run under
  ``timeout`` (``ICEBERGSYNC_KUBE_MAX_LIFETIME`` seconds, default 7200) and get SIGTERM if the
  pytest process dies (``PR_SET_PDEATHSIG``; they are gone ~10 s later), and they are always
  stopped at session end. ``ICEBERGSYNC_KEEP_KUBE_DIR=1`` keeps the work dir (logs, certs).

Fixtures: ``kube_tools`` (:class:`KubeTools`), ``helm_binary`` (path), ``kube_cluster``
(:class:`KubeCluster`: ``kubeconfig``, ``server``, ``env``, ``version``, ``token``, ``ca_file``,
``work_dir``, ``tools``, ``etcd_url``, ``api_client()``, ``make_user_kubeconfig(user)``, ``logs()``).
Helpers: :func:`apply_crd` (server-side apply a CRD YAML file and wait until Established),
:func:`crd_conditions`, :func:`wait_for_crd`, :func:`start_cluster` (for a private cluster).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
KUBE_TOOLS = REPO_ROOT / "scripts" / "infra" / "kube-tools.sh"
# A cold build of all tools takes tens of minutes on 2 cores; see docs/testing-infra-kube.md.
KUBE_TOOLS_TIMEOUT = float(os.environ.get("ICEBERGSYNC_KUBE_TOOLS_TIMEOUT", "3600"))
MAX_LIFETIME = int(os.environ.get("ICEBERGSYNC_KUBE_MAX_LIFETIME", "7200"))
START_TIMEOUT = float(os.environ.get("ICEBERGSYNC_KUBE_START_TIMEOUT", "180"))
FIELD_MANAGER = "icebergsync-tests"
ADMIN_USER = "icebergsync-admin"


class KubeInfraError(RuntimeError):
    """The Kubernetes test infrastructure could not be built or started."""


class _GiveUp(KubeInfraError):
    """Raised from a wait-loop check: retrying cannot help."""


# --------------------------------------------------------------------------------------------
# tools (scripts/infra/kube-tools.sh)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KubeTools:
    """Paths and pinned versions reported by ``kube-tools.sh --env``."""

    cache: Path
    k8s_version: str
    etcd_version: str
    helm_version: str
    spark_operator_version: str
    etcd: Path
    kube_apiserver: Path
    helm: Path
    spark_operator: Path
    spark_application_crd: Path
    scheduled_spark_application_crd: Path
    spark_connect_crd: Path

    @property
    def spark_operator_crds(self) -> tuple[Path, ...]:
        """Every CRD the Spark Operator controller watches (it does not start without all of them)."""
        return (self.spark_application_crd, self.scheduled_spark_application_crd, self.spark_connect_crd)


_tools: KubeTools | None = None


def ensure_kube_tools() -> KubeTools:
    """Run ``scripts/infra/kube-tools.sh --env`` (builds whatever is missing) and parse its output."""
    global _tools
    if _tools is not None:
        return _tools
    try:
        proc = subprocess.run(
            ["bash", str(KUBE_TOOLS), "--env"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=KUBE_TOOLS_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise KubeInfraError(
            f"{KUBE_TOOLS} did not finish within {KUBE_TOOLS_TIMEOUT:.0f}s "
            f"(ICEBERGSYNC_KUBE_TOOLS_TIMEOUT); output so far:\n{_tail(exc.stderr)}"
        ) from exc
    if proc.returncode != 0:
        raise KubeInfraError(f"{KUBE_TOOLS} failed with exit code {proc.returncode}:\n{_tail(proc.stderr)}")
    values = dict(
        line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line and not line.startswith("#")
    )
    try:
        tools = KubeTools(
            cache=Path(values["ICEBERGSYNC_CACHE"]),
            k8s_version=values["K8S_VERSION"],
            etcd_version=values["ETCD_VERSION"],
            helm_version=values["HELM_VERSION"],
            spark_operator_version=values["SPARK_OPERATOR_VERSION"],
            etcd=Path(values["ETCD_BIN"]),
            kube_apiserver=Path(values["KUBE_APISERVER_BIN"]),
            helm=Path(values["HELM_BIN"]),
            spark_operator=Path(values["SPARK_OPERATOR_BIN"]),
            spark_application_crd=Path(values["SPARK_APPLICATION_CRD"]),
            scheduled_spark_application_crd=Path(values["SCHEDULED_SPARK_APPLICATION_CRD"]),
            spark_connect_crd=Path(values["SPARK_CONNECT_CRD"]),
        )
    except KeyError as exc:
        raise KubeInfraError(f"{KUBE_TOOLS} --env did not report {exc}; output:\n{proc.stdout}") from exc
    for path in (tools.etcd, tools.kube_apiserver, tools.helm, tools.spark_operator):
        if not os.access(path, os.X_OK):
            raise KubeInfraError(f"{KUBE_TOOLS} succeeded but {path} is not an executable")
    for path in tools.spark_operator_crds:
        if not path.is_file():
            raise KubeInfraError(f"{KUBE_TOOLS} succeeded but {path} is missing")
    _tools = tools
    return tools


# --------------------------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------------------------


def _tail(text: str | bytes | None, lines: int = 40) -> str:
    if text is None:
        return "<no output>"
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:]) or "<no output>"


def _file_tail(path: Path, lines: int = 40) -> str:
    try:
        return _tail(path.read_bytes(), lines)
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """preexec_fn: ask the kernel to SIGTERM this child when the pytest process dies."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def describe_exit(self) -> str:
        return (
            f"{self.name} exited with code {self.popen.returncode}; last lines of {self.log}:\n"
            f"{_file_tail(self.log)}"
        )

    def stop(self, grace: float = 15.0) -> None:
        if self.popen.poll() is not None:
            return
        # The process runs in its own session (start_new_session) under `timeout`, which
        # forwards SIGTERM to the server; signal the whole group to be sure.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)


def _spawn(name: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> _Proc:
    """Start argv (with ``env``, default: inherited) with a bounded lifetime: `timeout` kills it
    after MAX_LIFETIME seconds, and the kernel SIGTERMs it when this (pytest) process dies."""
    timeout_bin = shutil.which("timeout")
    if timeout_bin:
        argv = [timeout_bin, "--kill-after=15", str(MAX_LIFETIME), *argv]
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    return _Proc(name, popen, log)


def _wait_until(what: str, check: Any, timeout: float, procs: list[_Proc], interval: float = 0.25) -> Any:
    """Poll ``check()`` until it returns a truthy value; fail early (with log tails) if a process
    died, or after ``timeout`` seconds (with the last error and log tails)."""
    deadline = time.monotonic() + timeout
    last_error: str = "no attempt yet"
    while True:
        for proc in procs:
            if not proc.alive():
                raise KubeInfraError(f"while waiting for {what}: {proc.describe_exit()}")
        try:
            result = check()
            if result:
                return result
            last_error = f"check returned {result!r}"
        except _GiveUp:
            raise
        except Exception as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- last lines of {p.log} ---\n{_file_tail(p.log)}" for p in procs)
            raise KubeInfraError(f"timed out after {timeout:.0f}s waiting for {what} ({last_error})\n{logs}")
        time.sleep(interval)


# --------------------------------------------------------------------------------------------
# certificates (openssl CLI)
# --------------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise KubeInfraError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")


def _make_pki(pki: Path) -> None:
    """CA, apiserver serving cert (127.0.0.1/localhost), admin client cert in system:masters and
    the service-account signing key pair."""
    if shutil.which("openssl") is None:
        raise KubeInfraError(
            "the 'openssl' CLI is needed to create test certificates (apt-get install openssl)"
        )
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=pki)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-sha256",
        "-days",
        "2",
        "-subj",
        "/CN=icebergsync-test-ca",
        "-out",
        "ca.crt",
        cwd=pki,
    )
    (pki / "serving.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,IP:10.0.0.1\n"
    )
    (pki / "client.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    for name, subj, ext in (
        ("apiserver", "/CN=kube-apiserver", "serving.ext"),
        ("admin", f"/O=system:masters/CN={ADMIN_USER}", "client.ext"),
    ):
        _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=pki)
        _openssl("req", "-new", "-key", f"{name}.key", "-subj", subj, "-out", f"{name}.csr", cwd=pki)
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-sha256",
            "-extfile",
            ext,
            "-out",
            f"{name}.crt",
            cwd=pki,
        )
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for key in pki.glob("*.key"):
        key.chmod(0o600)


# --------------------------------------------------------------------------------------------
# the cluster
# --------------------------------------------------------------------------------------------


@dataclass
class KubeCluster:
    """A running etcd + kube-apiserver (see the module docstring for what is missing)."""

    kubeconfig: Path  #: admin kubeconfig (client certificate in system:masters)
    server: str  #: https://127.0.0.1:<port>
    env: dict[str, str]  #: os.environ + KUBECONFIG, isolated HELM_* dirs, tools on PATH
    version: str  #: pinned Kubernetes version, e.g. "v1.35.4"
    token: str  #: static bearer token of the admin user
    ca_file: Path  #: CA that signed the serving certificate
    work_dir: Path  #: temp dir with data dirs, logs, certificates
    tools: KubeTools
    etcd_url: str
    _procs: list[_Proc] = field(default_factory=list, repr=False)
    _token_file: Path | None = field(default=None, repr=False)

    def api_client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` configured from ``self.kubeconfig``."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def make_user_kubeconfig(self, user: str, path: Path | None = None) -> Path:
        """Write a kubeconfig for the non-admin ``user`` (bearer token; its rights come only from
        RBAC). Users are registered at start-up in the static token file, see ``TEST_USERS``."""
        tokens = _user_tokens(self._token_file)
        if user not in tokens or user == ADMIN_USER:
            raise KeyError(f"user {user!r} is not a test user; known: {sorted(TEST_USERS)}")
        path = path or self.work_dir / f"kubeconfig-{user}"
        _write_kubeconfig(path, self.server, self.ca_file, user, {"token": tokens[user][0]})
        return path

    def stop(self) -> None:
        for proc in reversed(self._procs):
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.log} ---\n{_file_tail(p.log)}" for p in self._procs)


#: Extra (non-admin) users registered in the static token file: name -> groups.
TEST_USERS: dict[str, tuple[str, ...]] = {
    "alice": ("icebergsync-testers",),
    "bob": (),
}


def _user_tokens(token_file: Path | None) -> dict[str, tuple[str, tuple[str, ...]]]:
    result: dict[str, tuple[str, tuple[str, ...]]] = {}
    if token_file is None:
        return result
    for line in token_file.read_text().splitlines():
        parts = line.split(",", 3)
        groups = tuple(g for g in parts[3].strip('"').split(",") if g) if len(parts) > 3 else ()
        result[parts[1]] = (parts[0], groups)
    return result


def _write_kubeconfig(path: Path, server: str, ca_file: Path, user: str, creds: dict[str, str],
                      namespace: str = "default") -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "icebergsync-test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": creds}],
        "contexts": [
            {"name": user, "context": {"cluster": "icebergsync-test", "user": user, "namespace": namespace}}
        ],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)


def _https_get(url: str, ctx: ssl.SSLContext, token: str, timeout: float = 5.0) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def start_cluster(work_dir: Path, tools: KubeTools | None = None, attempts: int = 3) -> KubeCluster:
    """Start etcd + kube-apiserver under ``work_dir`` (free ports on 127.0.0.1); on failure
    everything started is stopped. Retries when a picked port was taken in the meantime."""
    tools = tools or ensure_kube_tools()
    for attempt in range(1, attempts + 1):
        try:
            return _start_cluster_once(work_dir, tools)
        except KubeInfraError as exc:
            if attempt == attempts or "address already in use" not in str(exc):
                raise
            shutil.rmtree(work_dir / "etcd", ignore_errors=True)
            for log in (work_dir / "logs").glob("*.log"):
                log.rename(log.with_suffix(f".attempt{attempt}"))
    raise AssertionError("unreachable")


def _start_cluster_once(work_dir: Path, tools: KubeTools) -> KubeCluster:
    work_dir.mkdir(parents=True, exist_ok=True)
    pki = work_dir / "pki"
    _make_pki(pki)
    logs = work_dir / "logs"
    logs.mkdir(exist_ok=True)

    token = uuid.uuid4().hex
    token_file = pki / "tokens.csv"
    lines = [f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"']
    for user, groups in TEST_USERS.items():
        lines.append(f'{uuid.uuid4().hex},{user},{user},"{",".join(groups)}"')
    token_file.write_text("\n".join(lines) + "\n")
    token_file.chmod(0o600)

    procs: list[_Proc] = []
    try:
        etcd_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        etcd = _spawn(
            "etcd",
            [
                str(tools.etcd),
                "--name=icebergsync-test",
                f"--data-dir={work_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=icebergsync-test=http://127.0.0.1:{peer_port}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",  # test data only; much faster on slow disks
                "--log-level=warn",
            ],
            logs / "etcd.log",
        )
        procs.append(etcd)

        def etcd_healthy() -> bool:
            with urllib.request.urlopen(f"{etcd_url}/health", timeout=5) as resp:
                return json.loads(resp.read()).get("health") == "true"

        _wait_until(f"etcd health at {etcd_url}", etcd_healthy, START_TIMEOUT, procs)

        server = f"https://127.0.0.1:{api_port}"
        apiserver = _spawn(
            "kube-apiserver",
            [
                str(tools.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                "--etcd-prefix=/registry",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={token_file}",
                "--authorization-mode=RBAC",
                "--anonymous-auth=false",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--allow-privileged=true",
                "--profiling=false",
                "--enable-priority-and-fairness=false",
                "--endpoint-reconciler-type=none",
                "--v=1",
            ],
            logs / "kube-apiserver.log",
        )
        procs.append(apiserver)

        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))

        def ready() -> bool:
            status, body = _https_get(f"{server}/readyz", ctx, token)
            if status != 200:
                raise KubeInfraError(f"/readyz -> {status}: {body[-500:]}")
            return True

        _wait_until(f"kube-apiserver /readyz at {server}", ready, START_TIMEOUT, procs)

        kubeconfig = work_dir / "kubeconfig"
        _write_kubeconfig(
            kubeconfig,
            server,
            pki / "ca.crt",
            ADMIN_USER,
            {"client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")},
        )
        helm_home = work_dir / "helm"
        env = dict(os.environ)
        env.update(
            KUBECONFIG=str(kubeconfig),
            HELM_CACHE_HOME=str(helm_home / "cache"),
            HELM_CONFIG_HOME=str(helm_home / "config"),
            HELM_DATA_HOME=str(helm_home / "data"),
            PATH=f"{tools.helm.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        return KubeCluster(
            kubeconfig=kubeconfig,
            server=server,
            env=env,
            version=tools.k8s_version,
            token=token,
            ca_file=pki / "ca.crt",
            work_dir=work_dir,
            tools=tools,
            etcd_url=etcd_url,
            _procs=procs,
            _token_file=token_file,
        )
    except BaseException:
        for proc in reversed(procs):
            proc.stop()
        raise


# --------------------------------------------------------------------------------------------
# CRDs
# --------------------------------------------------------------------------------------------


def server_side_apply_crd(
    cluster: KubeCluster, doc: dict[str, Any], field_manager: str = FIELD_MANAGER
) -> str:
    """Server-side apply one CustomResourceDefinition document; returns its name."""
    from kubernetes import client

    if doc.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"not a CustomResourceDefinition: kind={doc.get('kind')!r}")
    name = doc["metadata"]["name"]
    from kubernetes.client.rest import ApiException

    with cluster.api_client() as api_client:
        api = client.ApiextensionsV1Api(api_client)
        try:
            # Raw response: no need to deserialize the (large) CRD into client models.
            resp = api.patch_custom_resource_definition(
                name,
                body=doc,
                field_manager=field_manager,
                force=True,
                _content_type="application/apply-patch+yaml",
                _preload_content=False,
            )
        except ApiException as exc:
            raise KubeInfraError(
                f"server-side apply of CRD {name} -> {exc.status}: {exc.body!s:.2000}"
            ) from exc
        status = getattr(resp, "status", 200)
        if status >= 300:
            raise KubeInfraError(f"server-side apply of CRD {name} -> {status}: {resp.data[:2000]!r}")
    return name


def _get_crd(cluster: KubeCluster, name: str) -> dict[str, Any]:
    status, body = _https_get(
        f"{cluster.server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
        ssl.create_default_context(cafile=str(cluster.ca_file)),
        cluster.token,
    )
    if status != 200:
        raise KubeInfraError(f"GET CRD {name} -> {status}: {body[:500]}")
    return json.loads(body)


def crd_conditions(cluster: KubeCluster, name: str) -> dict[str, dict[str, Any]]:
    """The CRD's status conditions by type (``Established``, ``NamesAccepted``, ...)."""
    obj = _get_crd(cluster, name)
    return {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}


def wait_for_crd(cluster: KubeCluster, name: str, timeout: float = 60.0) -> None:
    """Wait until the CRD is Established and its resource is served (list returns 200)."""
    ctx = ssl.create_default_context(cafile=str(cluster.ca_file))

    def established() -> bool:
        obj = _get_crd(cluster, name)
        conditions = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
        if conditions.get("Established", {}).get("status") != "True":
            names = conditions.get("NamesAccepted", {})
            if names.get("status") == "False":
                raise _GiveUp(f"CRD {name}: NamesAccepted=False: {names.get('message')}")
            return False
        group = obj["spec"]["group"]
        plural = obj["spec"]["names"]["plural"]
        for version in obj["spec"]["versions"]:
            if version.get("served", True):
                status, _ = _https_get(
                    f"{cluster.server}/apis/{group}/{version['name']}/{plural}?limit=1", ctx, cluster.token
                )
                if status != 200:
                    return False
        return True

    _wait_until(f"CRD {name} to be Established", established, timeout, cluster._procs)


def apply_crd(cluster: KubeCluster, path: str | os.PathLike[str], timeout: float = 60.0) -> list[str]:
    """Server-side apply every CustomResourceDefinition in the YAML file ``path`` and wait until
    each is Established and served. Returns the CRD names."""
    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    if not docs:
        raise ValueError(f"{path}: no YAML documents")
    names = [server_side_apply_crd(cluster, doc) for doc in docs]
    for name in names:
        wait_for_crd(cluster, name, timeout)
    return names


# --------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kube_tools() -> KubeTools:
    """Built tools + CRD paths (runs scripts/infra/kube-tools.sh once per session)."""
    try:
        return ensure_kube_tools()
    except KubeInfraError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def helm_binary(kube_tools: KubeTools) -> Path:
    """Path to the pinned ``helm`` binary built by kube-tools.sh."""
    return kube_tools.helm


@pytest.fixture(scope="session")
def kube_cluster(kube_tools: KubeTools) -> Iterator[KubeCluster]:
    """A real etcd + kube-apiserver (RBAC on) with the Spark Operator CRDs (SparkApplication,
    ScheduledSparkApplication, SparkConnect) installed and Established. See the module docstring."""
    work_dir = Path(tempfile.mkdtemp(prefix="icebergsync-kube-"))
    try:
        cluster = start_cluster(work_dir, kube_tools)
    except KubeInfraError as exc:
        pytest.fail(f"could not start the test Kubernetes cluster: {exc}", pytrace=False)
    atexit.register(cluster.stop)
    try:
        try:
            for crd in kube_tools.spark_operator_crds:
                apply_crd(cluster, crd)
        except KubeInfraError as exc:
            pytest.fail(f"could not install the Spark Operator CRDs: {exc}\n{cluster.logs()}", pytrace=False)
        yield cluster
    finally:
        cluster.stop()
        atexit.unregister(cluster.stop)
        if os.environ.get("ICEBERGSYNC_KEEP_KUBE_DIR"):
            print(f"kube test dir kept: {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
