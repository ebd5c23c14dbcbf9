"""A stand-in for the Kubeflow Spark Operator in the fast e2e tests: no pods, the job as a local process.

The real Spark Operator controller runs in ``tests/e2e/test_spark_operator.py`` (see
``tests/infra/spark_operator.py``); this stand-in is for tests that need the job to actually run
and commit, which the bare API server (no nodes) cannot do.

It watches (polls) SparkApplications in one namespace and, for each new one, does what the Spark
Operator and kubelet would: "mounts" the ConfigMap volumes of the driver pod template and the
Secrets the application names (written
under a per-application root directory, read through the API), runs the job with the same entry
point and arguments (``spark_app/main.py``, the empty ``--master`` replaced by ``local[1]``, the
application's sparkConf as ``--conf``), and reports ``status.applicationState`` through the status
subresource: SUBMITTED, RUNNING, then COMPLETED, or FAILED with the Spark Operator's message
"driver container failed with ExitCode: N, Reason: Error".

When an application is deleted the Spark Operator deletes the driver pod (SIGTERM). With
``linger_on_delete`` the process is left running instead, as a driver that lingers would be: the
new version's fence must stop it.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

REPO_ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "sparkoperator.k8s.io", "v1beta2", "sparkapplications"
JOB_MAX_SECONDS = 600
log = logging.getLogger(__name__)


@dataclass
class Driver:
    """One job process standing in for an application's driver pod."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    deleted: bool = False
    exit_code: int | None = None


@dataclass
class SparkOperatorStandIn:
    api_client: client.ApiClient
    namespace: str
    work_dir: Path
    linger_on_delete: bool = False
    poll_interval: float = 0.3
    drivers: dict[str, Driver] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)

    # lifecycle ------------------------------------------------------------------------------

    def start(self) -> SparkOperatorStandIn:
        self._thread = threading.Thread(target=self._loop, name="spark-operator-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for driver in self.drivers.values():
            _signal_group(driver.process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                driver.process.wait(timeout=10)

    def exit_code(self, application: str) -> int | None:
        driver = self.drivers.get(application)
        return driver.exit_code if driver else None

    def driver_log(self, application: str) -> str:
        driver = self.drivers.get(application)
        return driver.log_path.read_text(errors="replace") if driver and driver.log_path.exists() else ""

    # the loop -------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self._tick()
            except Exception as error:  # keep playing; the test sees errors through its assertions
                self.errors.append(f"{type(error).__name__}: {error}")
                log.exception("stand-in tick failed")

    def _tick(self) -> None:
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)["items"]
        present = {item["metadata"]["name"]: item for item in items}
        for name, app in present.items():
            if name not in self.drivers:
                self._submit(app)
        for name, driver in self.drivers.items():
            if name not in present and not driver.deleted:
                driver.deleted = True
                if not self.linger_on_delete and driver.process.poll() is None:
                    driver.process.terminate()  # `timeout --foreground` passes SIGTERM to the job only
            if driver.exit_code is None and driver.process.poll() is not None:
                driver.exit_code = driver.process.returncode
                if not driver.deleted:
                    self._report_exit(name, driver.exit_code)

    def _submit(self, app: dict[str, Any]) -> None:
        name = app["metadata"]["name"]
        root = self.work_dir / name / "root"
        spec = app["spec"]
        driver = spec["driver"]
        for configmap_name, mount_path in _configmap_mounts(driver.get("template") or {}):
            configmap = self.core.read_namespaced_config_map(configmap_name, self.namespace)
            _write_files(root, mount_path, configmap.data or {})
        for mount in driver.get("secrets", []):
            secret = self.core.read_namespaced_secret(mount["name"], self.namespace)
            decoded = {key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}
            _write_files(root, mount["path"], decoded)
        arguments = [str(root) + arg if arg.startswith("/etc/") else arg for arg in spec.get("arguments", [])]
        master = arguments.index("--master")
        arguments[master + 1] = arguments[master + 1] or "local[1]"
        for key, value in (spec.get("sparkConf") or {}).items():
            arguments += ["--conf", f"{key}={value}"]
        assert spec["mainApplicationFile"] == "local:///opt/icebergsync/spark_app/main.py"
        env = {**os.environ, "ICEBERGSYNC_SECRETS_DIR": str(root / "etc/icebergsync/secrets"),
               "ICEBERGSYNC_SPARK_LOG_LEVEL": "ERROR", "PYTHONUNBUFFERED": "1"}
        log_path = self.work_dir / name / "driver.log"
        self._set_state(name, "SUBMITTED")
        with open(log_path, "wb") as out:
            process = subprocess.Popen(
                ["timeout", "--foreground", "--signal=KILL", str(JOB_MAX_SECONDS), sys.executable,
                 str(REPO_ROOT / "spark_app" / "main.py"), *arguments],
                cwd=self.work_dir / name, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.drivers[name] = Driver(name, process, log_path)
        self._set_state(name, "RUNNING")

    def _report_exit(self, name: str, code: int) -> None:
        if code == 0:
            self._set_state(name, "COMPLETED")
        else:
            self._set_state(name, "FAILED", f"driver container failed with ExitCode: {code}, Reason: Error")

    def _set_state(self, name: str, state: str, error: str = "") -> None:
        set_application_state(self.custom, self.namespace, name, state, error)


def set_application_state(custom: client.CustomObjectsApi, namespace: str, name: str, state: str,
                          error: str = "") -> None:
    """Write ``status.applicationState`` as the Spark Operator does (a gone application is ignored)."""
    status: dict[str, Any] = {"applicationState": {"state": state, "errorMessage": error},
                              "driverInfo": {"podName": f"{name}-driver"}}
    with contextlib.suppress(ApiException):
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, {"status": status})


def _configmap_mounts(template: dict[str, Any]) -> list[tuple[str, str]]:
    """(ConfigMap name, mount path) of every ConfigMap volume mounted in the pod template's containers."""
    spec = template.get("spec") or {}
    volumes = {volume["name"]: volume["configMap"]["name"] for volume in spec.get("volumes", [])
               if "configMap" in volume}
    return [(volumes[mount["name"]], mount["mountPath"]) for container in spec.get("containers", [])
            for mount in container.get("volumeMounts", []) if mount["name"] in volumes]


def _write_files(root: Path, mount_path: str, files: dict[str, str]) -> None:
    directory = root / mount_path.lstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in files.items():
        (directory / key).write_text(value)


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
