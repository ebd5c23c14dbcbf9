"""The product's path end to end, in pods, as users run it: ``helm install`` the chart (the
operator from the built image), MinIO and the Iceberg REST catalog as pods, a Secret, an
IcebergCatalog and an IcebergSync naming it, reading JSON files on MinIO into the REST catalog; the operator renders a
SparkApplication and the real Kubeflow Spark Operator runs its driver and executor pods.

Everything is asserted from the table (rows, snapshot properties, files) and the API (status,
pods, applications), never from log text. The tests run in order and share one sync: first
ingestion, then a deleted driver pod, a spec change, suspend/resume, and deletion, each with new
files arriving while it happens.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.table import Table

from icebergsync import protocol
from tests.cluster.impostor import REGISTERED, auth_secret, impostor_pod
from tests.cluster.product import CATALOG, StorageServices, installed_product, small_spark, wait_for
from tests.infra.cluster import NodeCluster
from tests.infra.image import BuiltImage
from tests.infra.spark_operator import SparkOperatorController
from tests.integration.sync_support import sink_commits, table_ids, unreferenced_sink_files

# Installing (image import, pods, helm) and the first Spark start take minutes on 2 shared cores.
pytestmark = pytest.mark.timeout(1800)

NAMESPACE = "e2e"
SYNC = "events"
TABLE = "e2e.events"
SINK_ID = f"{NAMESPACE}/{SYNC}"
INBOX = "landing/events"
ROWS_PER_FILE = 50
PROGRESS_SECONDS = 900.0
IMPOSTOR_NAMESPACE = "intruder"
IMPOSTOR_SECONDS = 150
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Run inside a Spark container: is a service-account token mounted, can the root filesystem and the
# scratch directories be written? One line per fact, whatever the outcome. The kernel answers EROFS
# ("Read-only file system") before checking permissions, so a read-only root is told from a directory
# the `spark` user may not write anyway.
POD_PROBE = (
    f"if [ -e {TOKEN_DIR}/token ]; then echo token=yes; else echo token=no; fi; "
    "for dir in / /opt/icebergsync /tmp /opt/icebergsync/work-dir; do "
    "if error=$(touch $dir/.probe 2>&1); then rm -f $dir/.probe; echo $dir=writable; "
    "else case $error in *Read-only*) echo $dir=read-only;; *) echo $dir=denied;; esac; fi; done"
)


@dataclass
class Deployment:
    """The installed product and the data written so far."""

    cluster: NodeCluster
    storage: StorageServices
    spark_operator: SparkOperatorController
    files_written: int = 0
    expected_ids: list[int] = field(default_factory=list)

    def write_file(self) -> None:
        """A new JSON-lines file with the next ROWS_PER_FILE ids (names sort in arrival order)."""
        first = self.files_written * ROWS_PER_FILE
        ids = list(range(first, first + ROWS_PER_FILE))
        with self.storage.filesystem().open_output_stream(f"{INBOX}/{self.files_written:05d}.json") as out:
            out.write("\n".join(json.dumps({"id": i, "name": f"n{i}"}) for i in ids).encode())
        self.files_written += 1
        self.expected_ids += ids

    def table(self) -> Table:
        return load_catalog("e2e", **self.storage.host_catalog_properties()).load_table(TABLE)

    def sync(self) -> dict[str, Any]:
        return json.loads(self.cluster.kubectl("-n", NAMESPACE, "get", "isync", SYNC, "-o", "json"))

    def patch_spec(self, patch: dict[str, Any]) -> None:
        self.cluster.kubectl(
            "-n", NAMESPACE, "patch", "isync", SYNC, "--type=merge", "-p", json.dumps({"spec": patch})
        )

    def pods(self, selector: str) -> list[dict[str, Any]]:
        return json.loads(self.cluster.kubectl("-n", NAMESPACE, "get", "pods", "-l", selector, "-o", "json"))[
            "items"
        ]

    def probe_pod(self, pod: dict[str, Any]) -> dict[str, str]:
        """``POD_PROBE``'s facts, from inside the pod's Spark container."""
        out = self.cluster.kubectl("-n", NAMESPACE, "exec", pod["metadata"]["name"], "-c",
                                   pod["spec"]["containers"][0]["name"], "--", "sh", "-c", POD_PROBE)
        return dict(line.split("=", 1) for line in out.split())

    def wait_all_rows(self) -> list[int]:
        """Wait until every id written is in the table; return the table's ids (duplicates kept)."""
        expected = sorted(self.expected_ids)

        def landed() -> list[int] | None:
            ids = table_ids(self.table())
            return ids if sorted(set(ids)) == expected else None

        return wait_for(f"{len(expected)} rows in {TABLE}", landed, PROGRESS_SECONDS, interval=5)


def sync_document() -> dict[str, Any]:
    return {
        "apiVersion": "icebergsync.io/v1alpha1",
        "kind": "IcebergSync",
        "metadata": {"name": SYNC, "namespace": NAMESPACE},
        "spec": {
            "source": {"files": {"path": f"s3a://{INBOX}/", "format": "json", "secretRef": {"name": "s3"}}},
            "schema": [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"}],
            "table": {"catalogRef": {"name": CATALOG}, "name": TABLE},
            "commit": {"interval": "5s", "pollInterval": "2s", "targetFileSize": "8Mi"},
            "spark": small_spark(),
        },
    }


@pytest.fixture(scope="module")
def deployment(
    node_cluster: NodeCluster, icebergsync_image: BuiltImage, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    with installed_product(node_cluster, icebergsync_image, NAMESPACE, ["landing", "lake"],
                           tmp_path_factory.mktemp("spark-operator")) as product:
        deployment = Deployment(node_cluster, product.storage, product.spark_operator)
        for _ in range(3):
            deployment.write_file()
        node_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(sync_document()))
        yield deployment


def current_version(deployment: Deployment) -> int:
    return int(deployment.sync()["status"]["sinkVersion"])


def test_every_row_lands_once_and_the_status_says_running(deployment: Deployment) -> None:
    ids = deployment.wait_all_rows()
    assert ids == sorted(deployment.expected_ids)

    def running_with_commit() -> dict[str, Any] | None:
        status = deployment.sync().get("status", {})
        ok = status.get("phase") == "Running" and status.get("lastCommit") and status.get("lag")
        return status if ok else None

    status = wait_for("phase Running with a last commit and lag", running_with_commit, 300)
    table = deployment.table()
    sink_snapshots = {s.snapshot_id for s in table.metadata.snapshots if protocol.parse_commit(s)}
    assert int(status["lastCommit"]["snapshotId"]) in sink_snapshots
    assert status["lag"] == "0 files"
    application = json.loads(
        deployment.cluster.kubectl(
            "-n", NAMESPACE, "get", "sparkapplication", status["application"], "-o", "json"
        )
    )
    assert application["status"]["applicationState"]["state"] == "RUNNING"
    (driver,) = deployment.pods("spark-role=driver")
    (executor,) = deployment.pods("spark-role=executor")
    # Asserted from inside the running pods: the job above ran with a read-only root filesystem.
    scratch = {"/tmp": "writable", "/opt/icebergsync/work-dir": "writable"}
    read_only = {"/": "read-only", "/opt/icebergsync": "read-only"}
    assert deployment.probe_pod(executor) == {"token": "no", **read_only, **scratch}
    assert deployment.probe_pod(driver) == {"token": "yes", **read_only, **scratch}  # it creates the executors


def test_a_pod_of_another_namespace_cannot_join_the_sync_as_an_executor(deployment: Deployment) -> None:
    """Attack 17 (docs/security.md): the real executor's command and environment, run from another
    namespace, join the application only with its secret; without it (Spark's authentication off,
    or a wrong secret) the driver never registers them, and the sync goes on, every row once."""
    cluster = deployment.cluster
    (executor,) = deployment.pods("spark-role=executor")
    knowing = {"no-auth": None, "wrong-secret": secrets.token_urlsafe(32), "with-secret": auth_secret(executor)}
    cluster.kubectl("create", "namespace", IMPOSTOR_NAMESPACE)
    try:
        for index, (name, secret) in enumerate(knowing.items()):
            pod = impostor_pod(executor, name, IMPOSTOR_NAMESPACE, str(900 + index), secret, IMPOSTOR_SECONDS)
            cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))

        def log_of(name: str) -> str:
            return cluster.kubectl("-n", IMPOSTOR_NAMESPACE, "logs", name)

        wait_for("the impostor holding the secret to register (the control)",
                 lambda: REGISTERED in log_of("with-secret"), 300, interval=5)
        cluster.kubectl("-n", IMPOSTOR_NAMESPACE, "delete", "pod", "with-secret", "--wait=false")
        for name in ("no-auth", "wrong-secret"):
            def ended(pod: str = name) -> dict[str, Any] | None:
                status = json.loads(cluster.kubectl("-n", IMPOSTOR_NAMESPACE, "get", "pod", pod, "-o", "json"))
                states = status["status"].get("containerStatuses") or [{}]
                return states[0].get("state", {}).get("terminated")

            wait_for(f"impostor {name} to end", ended, IMPOSTOR_SECONDS + 150, interval=5)
            assert REGISTERED not in log_of(name), f"impostor {name} joined the application"
    finally:
        cluster.kubectl("delete", "namespace", IMPOSTOR_NAMESPACE, "--wait=false")
    deployment.write_file()
    assert deployment.wait_all_rows() == sorted(deployment.expected_ids)


def test_a_deleted_driver_pod_recovers_without_duplicates(deployment: Deployment) -> None:
    version_before = max(c.writer.version for c in sink_commits(deployment.table(), SINK_ID))
    (driver,) = deployment.pods("spark-role=driver")
    deployment.write_file()
    deployment.cluster.kubectl("-n", NAMESPACE, "delete", "pod", driver["metadata"]["name"], "--wait=false")
    deployment.write_file()

    ids = deployment.wait_all_rows()
    assert ids == sorted(deployment.expected_ids)
    versions = [c.writer.version for c in sink_commits(deployment.table(), SINK_ID)]
    assert max(versions) > version_before


def test_a_spec_change_fences_the_old_version(deployment: Deployment) -> None:
    old = current_version(deployment)
    deployment.write_file()
    deployment.patch_spec({"commit": {"interval": "4s"}})
    deployment.write_file()
    wait_for("a new sink version", lambda: current_version(deployment) > old or None, 300)

    ids = deployment.wait_all_rows()
    assert ids == sorted(deployment.expected_ids)
    commits = sink_commits(deployment.table(), SINK_ID)
    new = current_version(deployment)
    first_of_new = next(i for i, c in enumerate(commits) if c.writer.version == new)
    # The fence: once the new version committed, no older version commits after it.
    assert all(c.writer.version >= new for c in commits[first_of_new:])


def test_suspend_and_resume_lose_and_duplicate_nothing(deployment: Deployment) -> None:
    deployment.write_file()
    deployment.patch_spec({"suspend": True})
    wait_for("phase Suspended", lambda: deployment.sync()["status"].get("phase") == "Suspended", 300)
    wait_for("no Spark pods", lambda: not deployment.pods("spark-role"), 300)
    deployment.write_file()
    deployment.write_file()
    deployment.patch_spec({"suspend": False})

    ids = deployment.wait_all_rows()
    assert ids == sorted(deployment.expected_ids)


def test_deleting_the_sync_removes_its_pods_and_leaves_no_staged_files(deployment: Deployment) -> None:
    deployment.cluster.kubectl("-n", NAMESPACE, "delete", "isync", SYNC, "--timeout=300s", timeout=330)

    wait_for("no Spark pods", lambda: not deployment.pods("spark-role"), 300)
    applications = json.loads(
        deployment.cluster.kubectl("-n", NAMESPACE, "get", "sparkapplications", "-o", "json")
    )
    assert applications["items"] == []
    table = deployment.table()
    assert table_ids(table) == sorted(deployment.expected_ids)
    assert unreferenced_sink_files(table, SINK_ID) == []
