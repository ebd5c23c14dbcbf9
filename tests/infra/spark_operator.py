"""The real Kubeflow Spark Operator controller as a test fixture.

``scripts/infra/kube-tools.sh`` builds ``spark-operator`` from ``github.com/kubeflow/spark-operator/v2``
(pinned version, Go module proxy). :func:`start_spark_operator` runs ``spark-operator controller
start`` as a host process beside the API server, the way the Helm chart runs it in a pod:

* It reaches the API server through a kubeconfig (``KUBECONFIG``), and submits applications
  with ``$SPARK_HOME/bin/spark-submit`` against ``k8s://https://$KUBERNETES_SERVICE_HOST:PORT``
  (both set from the API server URL). ``SPARK_HOME`` is the venv's pyspark, whose jars include
  Spark's Kubernetes client; spark-submit authenticates with the same kubeconfig.
* Its only server is the health probe, on 127.0.0.1 (metrics and pprof are off). No webhook
  runs: the applications the IcebergSync operator renders carry everything Spark's conf cannot
  express in pod templates (see docs/testing-infra-spark-operator.md).
* It watches only the given namespaces, lives at most ``ICEBERGSYNC_KUBE_MAX_LIFETIME`` seconds
  (``timeout``), dies with pytest, and is stopped by the fixture after the test. Its log is
  ``<work_dir>/spark-operator.log``.

Fixture: ``spark_operator`` -- a function ``start(namespaces)`` returning a
:class:`SparkOperatorController`; every controller started is stopped after the test. For
another cluster (e.g. one with nodes) call :func:`start_spark_operator` directly.
"""

from __future__ import annotations

import importlib.util
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.infra.kube import (
    START_TIMEOUT,
    KubeCluster,
    KubeInfraError,
    _file_tail,
    _free_port,
    _Proc,
    _spawn,
    _wait_until,
    ensure_kube_tools,
)


def pyspark_home() -> Path:
    """The installed pyspark package: a complete Spark distribution usable as ``SPARK_HOME``."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise KubeInfraError("pyspark is not installed in this environment (run scripts/bootstrap.sh)")
    home = Path(spec.origin).parent
    if not os.access(home / "bin" / "spark-submit", os.X_OK):
        raise KubeInfraError(f"{home}/bin/spark-submit is missing or not executable")
    return home


@dataclass
class SparkOperatorController:
    """A running ``spark-operator controller start`` process."""

    namespaces: tuple[str, ...]
    health_url: str  #: http://127.0.0.1:<port>, serves /healthz and /readyz
    log: Path
    _proc: _Proc

    @property
    def pid(self) -> int:
        """The ``timeout`` wrapper's pid; the controller process is its child."""
        return self._proc.popen.pid

    def alive(self) -> bool:
        return self._proc.alive()

    def stop(self) -> None:
        """SIGTERM (the controller shuts down its manager), SIGKILL after a grace period."""
        self._proc.stop()

    def log_tail(self, lines: int = 60) -> str:
        return _file_tail(self.log, lines)


def start_spark_operator(
    kubeconfig: Path,
    server: str,
    work_dir: Path,
    namespaces: Sequence[str],
    *,
    binary: Path | None = None,
    spark_home: Path | None = None,
    extra_args: Sequence[str] = (),
) -> SparkOperatorController:
    """Start the Spark Operator controller against the API server ``server`` (reached with
    ``kubeconfig``), watching ``namespaces``; wait until its health probe answers.

    ``binary`` defaults to the one built by kube-tools.sh, ``spark_home`` to the venv's pyspark.
    """
    if not namespaces:
        raise ValueError("watch explicit namespaces: an empty list would mean the whole cluster")
    binary = binary or ensure_kube_tools().spark_operator
    spark_home = spark_home or pyspark_home()
    api = urlsplit(server)
    if api.hostname is None or api.port is None:
        raise ValueError(f"API server URL needs a host and a port: {server!r}")
    work_dir.mkdir(parents=True, exist_ok=True)
    health = f"127.0.0.1:{_free_port()}"
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "SPARK_HOME": str(spark_home),
        # In a pod these come from the kubernetes Service; the controller builds spark-submit's
        # --master from them.
        "KUBERNETES_SERVICE_HOST": api.hostname,
        "KUBERNETES_SERVICE_PORT": str(api.port),
    }
    argv = [
        str(binary),
        "controller",
        "start",
        f"--namespaces={','.join(namespaces)}",
        f"--health-probe-bind-address={health}",
        "--metrics-bind-address=0",
        "--pprof-bind-address=0",
        "--leader-election=false",
        "--zap-log-level=info",
        *extra_args,
    ]
    log = work_dir / "spark-operator.log"
    proc = _spawn("spark-operator", argv, log, env=env)
    controller = SparkOperatorController(tuple(namespaces), f"http://{health}", log, proc)
    try:
        _wait_until(f"spark-operator /readyz at {health}", lambda: _ready(controller.health_url),
                    START_TIMEOUT, [proc])
    except BaseException:
        controller.stop()
        raise
    return controller


def _ready(health_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{health_url}/readyz", timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError):
        return False


@pytest.fixture
def spark_operator(kube_cluster: KubeCluster, tmp_path: Path) -> Iterator[Callable[[Sequence[str]], SparkOperatorController]]:
    """Start the real Spark Operator controller for some namespaces of ``kube_cluster``; logs under
    ``<tmp_path>/spark-operator-<n>/``; all started are stopped after the test."""
    started: list[SparkOperatorController] = []

    def start(namespaces: Sequence[str]) -> SparkOperatorController:
        try:
            controller = start_spark_operator(kube_cluster.kubeconfig, kube_cluster.server,
                                              tmp_path / f"spark-operator-{len(started)}", namespaces,
                                              binary=kube_cluster.tools.spark_operator)
        except KubeInfraError as exc:
            pytest.fail(f"could not start the Spark Operator controller: {exc}", pytrace=False)
        started.append(controller)
        return controller

    yield start
    for controller in started:
        controller.stop()
