"""The one-node Kubernetes cluster of ``scripts/infra/cluster.sh`` as a pytest fixture.

``node_cluster`` (session scope) builds what is missing (``cluster.sh build``: Debian packages,
the Kubernetes binaries, CoreDNS, the pause/CoreDNS/kubectl images), starts the cluster and stops
it at session end: etcd and the control plane on 127.0.0.1, containerd + kubelet + kube-proxy in
the network namespace ``icebergsync-node``, CoreDNS as a pod. See docs/testing-infra-cluster.md.

One cluster per machine: a session holds ``CLUSTER_LOCK`` (waiting for another session to finish)
and clears the leftovers of a crashed run before it starts. The daemons have a bounded lifetime
(``ICEBERGSYNC_CLUSTER_MAX_LIFETIME``). It needs root; without it (or if the node cannot come up)
the fixture fails and says why, it never skips.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO_ROOT / "scripts" / "infra" / "cluster.sh"
BUILD_TIMEOUT = float(os.environ.get("ICEBERGSYNC_CLUSTER_BUILD_TIMEOUT", "3600"))
START_TIMEOUT = 900.0
LOCK_TIMEOUT = float(os.environ.get("ICEBERGSYNC_CLUSTER_LOCK_TIMEOUT", "3600"))
CLUSTER_LOCK = Path("/tmp/icebergsync-cluster.session.lock")


class ClusterError(RuntimeError):
    """The one-node cluster could not be built, started or stopped."""


def run_cluster_sh(*args: str, timeout: float) -> str:
    """Run ``cluster.sh ARGS``; return its stdout, raise :class:`ClusterError` with its stderr."""
    try:
        proc = subprocess.run(
            ["bash", str(CLUSTER_SH), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"cluster.sh {' '.join(args)} did not finish within {timeout:.0f}s") from exc
    if proc.returncode != 0:
        raise ClusterError(f"cluster.sh {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    return proc.stdout


@dataclass(frozen=True)
class NodeCluster:
    """A running one-node cluster: admin kubeconfig, the pinned kubectl, where its state lives."""

    kubeconfig: Path
    server: str  #: https://127.0.0.1:<port> (the API server, on the host)
    kubectl_bin: Path
    node_name: str
    node_ip: str
    state_dir: Path

    @property
    def env(self) -> dict[str, str]:
        """os.environ with KUBECONFIG pointing at the cluster and kubectl/helm on PATH."""
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.kubectl_bin.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120.0) -> str:
        """Run kubectl against the cluster; return stdout, fail with stderr."""
        proc = subprocess.run(
            [str(self.kubectl_bin), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-3000:]}")
        return proc.stdout

    def api_client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` for the admin user."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def import_images(self, archives: Sequence[Path]) -> None:
        """Load docker-archive tarballs into the node's containerd (``imagePullPolicy: Never``)."""
        run_cluster_sh("import", *map(str, archives), timeout=1800)

    def tag_image(self, image: str, name: str) -> None:
        """Give an image of the node's containerd another name, as a push to a registry under that name would."""
        run_cluster_sh("tag", image, name, timeout=120)


def _parse_env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def start_node_cluster() -> NodeCluster:
    """Build what is missing, clear leftovers of a crashed run, start the cluster."""
    if os.geteuid() != 0:
        raise ClusterError("the one-node cluster needs root (network namespace, containerd, kubelet)")
    run_cluster_sh("build", timeout=BUILD_TIMEOUT)
    run_cluster_sh("stop", timeout=300)
    try:
        values = _parse_env(run_cluster_sh("start", timeout=START_TIMEOUT))
    except ClusterError:
        run_cluster_sh("stop", timeout=300)
        raise
    return NodeCluster(
        kubeconfig=Path(values["KUBECONFIG"]),
        server=values["API_SERVER"],
        kubectl_bin=Path(values["KUBECTL"]),
        node_name=values["NODE_NAME"],
        node_ip=values["NODE_IP"],
        state_dir=Path(values["CLUSTER_DIR"]),
    )


def stop_node_cluster() -> None:
    """Stop everything the cluster started (idempotent)."""
    run_cluster_sh("stop", timeout=300)


def _lock_cluster() -> int:
    """Take the machine-wide cluster lock, waiting up to LOCK_TIMEOUT for another session."""
    fd = os.open(CLUSTER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_TIMEOUT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise ClusterError(
                    f"another test session held {CLUSTER_LOCK} for {LOCK_TIMEOUT:.0f}s"
                ) from None
            time.sleep(2)


@pytest.fixture(scope="session")
def node_cluster() -> Iterator[NodeCluster]:
    """The running one-node cluster (see the module docstring); stopped at session end."""
    try:
        lock = _lock_cluster()
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        try:
            cluster = start_node_cluster()
        except ClusterError as exc:
            pytest.fail(f"the one-node Kubernetes cluster did not come up: {exc}", pytrace=False)
        atexit.register(stop_node_cluster)
        try:
            yield cluster
        finally:
            stop_node_cluster()
            atexit.unregister(stop_node_cluster)
    finally:
        os.close(lock)
