"""Platform install on the one-node cluster: the README's own Helm and kubectl commands as written (placeholders
filled in, the example's catalog pointed at the cluster's REST catalog and its Secret stub filled, as the
README says), and a sync placed on a tainted node with a registry pull secret, as a platform runs it.

The README's example asks for three cores, more than this two-core node has: its driver is created under the
Spark job's ServiceAccount in the example's namespace (the README's install once created that account in the
operator's namespace only, and every launch failed) and the sync is deleted before it would need its executors.
The placement test then runs a small sync to its last row on a node only it tolerates, its driver serving the
job's metrics on the port the pod declares.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from icebergsync.metrics.names import RECORDS_COMMITTED
from tests.cluster.product import (
    CORE_REQUESTS,
    S3_ACCESS_KEY,
    S3_REGION,
    S3_SECRET_KEY,
    Product,
    StorageServices,
    installed_product,
    small_spark,
    wait_for,
)
from tests.infra.cluster import NodeCluster
from tests.infra.image import BuiltImage
from tests.integration.sync_support import table_ids

pytestmark = pytest.mark.timeout(1800)

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
EXAMPLE = REPO_ROOT / "examples" / "generator-rest-s3.yaml"
CHART = REPO_ROOT / "charts" / "icebergsync"
NAMESPACE = "data"  # the README's
REGISTRY = "icebergsync.local"
TAINT_KEY, TAINT_VALUE = "icebergsync.io/dedicated", "spark"
PULL_SECRET = "regcred"
PLACED_ROWS = 3000


def readme_commands(program: str) -> list[list[str]]:
    """Each command of the README's ``sh`` blocks that runs ``program``, continuation lines joined."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith(f"{program} "):
                commands.append(shlex.split(line))
    return commands


def filled_in(command: list[str], values: dict[str, str]) -> list[str]:
    """``command`` with the README's placeholders replaced; a placeholder left unfilled fails the test."""
    out = []
    for word in command:
        for placeholder, value in values.items():
            word = word.replace(placeholder, value)
        assert not re.search(r"<[^>]+>", word), f"the README's {word!r} has a placeholder the test does not know"
        out.append(word)
    return out


def app_version() -> str:
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


def run(cluster: NodeCluster, command: list[str], helm: Path) -> str:
    binary = {"helm": str(helm), "kubectl": cluster.kubectl_bin}[command[0]]
    done = subprocess.run([binary, *command[1:]], cwd=REPO_ROOT, env=cluster.env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, f"{shlex.join(command)} failed: {done.stderr.strip() or done.stdout}"
    return done.stdout


class Platform:
    """The product installed with the README's commands in namespace ``data``."""

    def __init__(self, product: Product, helm: Path) -> None:
        self.product, self.helm = product, helm

    @property
    def cluster(self) -> NodeCluster:
        return self.product.cluster

    def example_documents(self) -> list[dict[str, Any]]:
        """The README's example with what the README tells the user to do first: its IcebergCatalog pointed at
        the catalog (the cluster's REST catalog, its warehouse on MinIO) and its Secret stub filled in."""
        documents = list(yaml.safe_load_all(EXAMPLE.read_text()))
        storage = self.product.storage
        for document in documents:
            if document["kind"] == "Secret":
                document["stringData"] = {"s3.access-key-id": S3_ACCESS_KEY, "s3.secret-access-key": S3_SECRET_KEY}
            elif document["kind"] == "IcebergCatalog":
                document["spec"]["uri"] = storage.rest_uri_in_cluster
                document["spec"]["properties"] = {"s3.endpoint": storage.s3_endpoint_in_cluster,
                                                  "s3.region": S3_REGION, "s3.path-style-access": "true"}
        return documents

    def driver_pods(self, sync: str) -> list[dict[str, Any]]:
        return self.product.pods(f"spark-role=driver,icebergsync.io/sync={sync}")


def install_as_the_readme_says(cluster: NodeCluster, image: BuiltImage) -> Any:
    """The chart installed by the README's ``helm install`` line, the image pushed under the README's name."""

    def install(helm: Path, storage: StorageServices) -> None:
        cluster.tag_image(image.name, f"{REGISTRY}/icebergsync:{app_version()}")  # imported by installed_product
        (command,) = [c for c in readme_commands("helm") if c[1] == "install"]
        run(cluster, filled_in(command, {"<registry>": REGISTRY, "<catalog URI>": storage.rest_uri_in_cluster,
                                         "<S3 endpoint>": storage.s3_endpoint_in_cluster}), helm)
        cluster.kubectl("-n", "icebergsync-system", "rollout", "status", "deployment/icebergsync", "--timeout=300s",
                        timeout=330)

    return install


@pytest.fixture(scope="module")
def platform(node_cluster: NodeCluster, icebergsync_image: BuiltImage,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    from tests.infra.kube import ensure_kube_tools

    with installed_product(node_cluster, icebergsync_image, NAMESPACE, ["lake"],
                           tmp_path_factory.mktemp("spark-operator"),
                           install_chart=install_as_the_readme_says(node_cluster, icebergsync_image)) as product:
        yield Platform(product, ensure_kube_tools().helm)


def test_the_readmes_commands_launch_its_example_in_its_namespace(platform: Platform) -> None:
    (binding,) = [c for c in readme_commands("kubectl") if c[1:3] == ["create", "rolebinding"]]
    run(platform.cluster, filled_in(binding, {"<team>": "data-team"}), platform.helm)
    can_create = platform.cluster.kubectl("auth", "can-i", "create", "icebergsyncs", "-n", NAMESPACE,
                                          "--as=ana", "--as-group=data-team")
    assert can_create.strip() == "yes"

    (apply,) = [c for c in readme_commands("kubectl") if c[1] == "apply"]
    assert apply == ["kubectl", "apply", "-n", NAMESPACE, "-f", "examples/generator-rest-s3.yaml"]
    platform.product.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": platform.example_documents()}))
    try:
        (driver,) = wait_for("the example's driver pod", lambda: platform.driver_pods("trips-demo") or None, 600,
                             interval=5)
        assert driver["spec"]["serviceAccountName"] == "icebergsync-spark"
        status = platform.product.sync("trips-demo").get("status", {})
        assert not [c for c in status.get("conditions", []) if c["type"] == "Stalled" and c["status"] == "True"]
        (listed,) = [c for c in readme_commands("kubectl") if c[1] == "get" and c[2] == "isync"]
        assert "trips-demo" in run(platform.cluster, listed, platform.helm)
    finally:
        platform.product.kubectl("delete", "isync", "trips-demo", "--timeout=300s", timeout=330)


@contextmanager
def tainted_node(platform: Platform) -> Iterator[None]:
    """The node tainted ``icebergsync.io/dedicated=spark:NoSchedule`` (running pods stay), untainted after."""
    node = platform.cluster.node_name
    platform.cluster.kubectl("taint", "nodes", node, f"{TAINT_KEY}={TAINT_VALUE}:NoSchedule")
    try:
        yield
    finally:
        platform.cluster.kubectl("taint", "nodes", node, f"{TAINT_KEY}-")


def open_placement_policy(platform: Platform) -> None:
    """What the admin does for the platform: the taint key and the pull secret (and, on this two-core node, the
    pods' core requests) opened in the chart, the registry credentials created in the sync's namespace."""
    allowed = yaml.safe_load((CHART / "values.yaml").read_text())["policy"]["allowedSparkConf"]
    run(platform.cluster, ["helm", "upgrade", "icebergsync", str(CHART), "--namespace", "icebergsync-system",
                           "--reuse-values", "--set", f"policy.allowedTolerations={{{TAINT_KEY}}}",
                           "--set", f"imagePullSecrets[0].name={PULL_SECRET}",
                           "--set-json", f"policy.allowedSparkConf={json.dumps([*allowed, *CORE_REQUESTS])}",
                           "--wait", "--timeout=5m"], platform.helm)
    auth = base64.b64encode(b"reader:secret").decode()
    platform.product.apply({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": PULL_SECRET},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": json.dumps({"auths": {REGISTRY: {"auth": auth}}})},
    })  # fmt: skip


def untolerated_pod_is_unschedulable(platform: Platform) -> bool:
    """A pod without the toleration is refused by the scheduler for the taint (so the taint is real)."""
    platform.product.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "untolerated"},
        "spec": {"containers": [{"name": "main", "image": f"{REGISTRY}/icebergsync:{app_version()}",
                                 "command": ["sleep", "600"]}]},
    })  # fmt: skip
    try:
        def refused() -> bool:
            pod = json.loads(platform.product.kubectl("get", "pod", "untolerated", "-o", "json"))
            conditions = pod["status"].get("conditions", [])
            if any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                   and "untolerated taint" in c["message"] for c in conditions):
                return True
            raise AssertionError(f"node {pod['spec'].get('nodeName')}, phase {pod['status'].get('phase')}, "
                                 f"conditions {conditions}")

        return wait_for("the scheduler refusing the untolerated pod", refused, 120)
    finally:
        platform.product.kubectl("delete", "pod", "untolerated", "--wait=false")


def test_a_sync_tolerating_a_tainted_node_runs_there_with_the_pull_secret(platform: Platform) -> None:
    open_placement_policy(platform)  # before the taint: the operator's pod restarts with the pull secret
    with tainted_node(platform):
        assert untolerated_pod_is_unschedulable(platform)
        run_placed_sync(platform)


def committed_records(platform: Platform, driver: dict[str, Any]) -> float | None:
    """``icebergsync_job_records_committed_total`` of demo.placed as the running driver serves it on its metrics
    port (read inside the pod: what a PodMonitor scrapes)."""
    port = next(p["containerPort"] for c in driver["spec"]["containers"] for p in c.get("ports", [])
                if p["name"] == "metrics")
    text = platform.product.kubectl("exec", driver["metadata"]["name"], "-c", driver["spec"]["containers"][0]["name"],
                                    "--", "python", "-c", "import sys, urllib.request; sys.stdout.write(urllib.request"
                                    f".urlopen('http://127.0.0.1:{port}/metrics').read().decode())")
    for line in text.splitlines():
        if line.startswith(RECORDS_COMMITTED.name) and 'table="demo.placed"' in line:
            return float(line.rsplit(" ", 1)[1]) or None
    return None


def run_placed_sync(platform: Platform) -> None:
    """A small generator sync whose driver and executor tolerate the taint: every row lands once."""
    toleration = {"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "NoSchedule"}
    spark = small_spark()
    for role in ("driver", "executor"):
        spark[role] = {**spark[role], "tolerations": [toleration], "nodeSelector": {"kubernetes.io/os": "linux"}}
    catalog = next(d for d in platform.example_documents() if d["kind"] == "IcebergCatalog")
    secret = next(d for d in platform.example_documents() if d["kind"] == "Secret")
    platform.product.apply(catalog)
    platform.product.apply(secret)
    platform.product.apply({
        "apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "metadata": {"name": "placed"},
        "spec": {"source": {"generator": {"rowsPerSecond": 100, "totalRows": PLACED_ROWS}},
                 "table": {"catalogRef": {"name": catalog["metadata"]["name"]}, "name": "demo.placed"},
                 "commit": {"interval": "5s"}, "spark": spark},
    })  # fmt: skip
    (driver,) = wait_for("the placed sync's driver pod", lambda: platform.driver_pods("placed") or None, 600,
                         interval=5)
    assert toleration | {"operator": "Equal"} in driver["spec"]["tolerations"]
    assert {"name": PULL_SECRET} in driver["spec"]["imagePullSecrets"]
    committed = wait_for("the driver's metrics counting committed records", lambda: committed_records(platform, driver),
                         600, interval=5)
    assert committed > 0

    def every_row() -> bool:
        table = platform.product.catalog().load_table("demo.placed")
        return table.current_snapshot() is not None and table_ids(table) == list(range(PLACED_ROWS))

    wait_for(f"{PLACED_ROWS} rows in demo.placed, once each", every_row, 900, interval=5)
    executors = platform.product.pods("spark-role=executor,icebergsync.io/sync=placed")
    assert all(toleration | {"operator": "Equal"} in pod["spec"]["tolerations"] for pod in executors)
