"""The product installed on the one-node cluster the way users install it, for the end-to-end
tier: the image loaded into containerd, MinIO and an Iceberg REST catalog as pods, the chart
installed with ``helm install``, the real Spark Operator controller beside the API server.

The host reaches the in-cluster Services by ClusterIP (cluster.sh routes the Service network to
the node), so tests read the table with pyiceberg exactly as the pods see it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.infra.cluster import NodeCluster
from tests.infra.image import BUILD_TIMEOUT, IMAGE_SCRIPT, BuiltImage, run_script

REPO_ROOT = Path(__file__).resolve().parents[2]
S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION = "icebergsync", "icebergsync-secret", "us-east-1"
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 2.0) -> T:
    """Poll ``probe`` until it returns a value that is neither None nor False; fail saying what."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = probe()
            if result is not None and result is not False:
                return result
            last = result
        except Exception as exc:  # a probe may fail while things come up
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last})")
        time.sleep(interval)


def saved_image(image: BuiltImage) -> Path:
    """The image's docker-archive tarball (``image.sh save`` writes it unless it is current)."""
    run_script(IMAGE_SCRIPT, "save", timeout=BUILD_TIMEOUT)
    return image.tarball


def _deployment(name: str, container: dict[str, Any], volumes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, **container}], "volumes": volumes},
            },
        },
    }


def _service(name: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": port, "targetPort": port}]},
    }


@dataclass(frozen=True)
class StorageServices:
    """MinIO and the REST catalog running as pods in ``namespace``."""

    namespace: str
    minio_cluster_ip: str
    rest_cluster_ip: str

    @property
    def s3_endpoint_in_cluster(self) -> str:
        return f"http://minio.{self.namespace}.svc.cluster.local:9000"

    @property
    def rest_uri_in_cluster(self) -> str:
        return f"http://rest.{self.namespace}.svc.cluster.local:8181"

    def host_catalog_properties(self) -> dict[str, str]:
        """pyiceberg properties for reading the catalog and the warehouse from the host."""
        return {
            "type": "rest",
            "uri": f"http://{self.rest_cluster_ip}:8181",
            "s3.endpoint": f"http://{self.minio_cluster_ip}:9000",
            "s3.access-key-id": S3_ACCESS_KEY,
            "s3.secret-access-key": S3_SECRET_KEY,
            "s3.region": S3_REGION,
            "s3.path-style-access": "true",
        }

    def filesystem(self) -> Any:
        """A pyarrow S3FileSystem on MinIO, from the host."""
        from pyarrow import fs

        return fs.S3FileSystem(
            access_key=S3_ACCESS_KEY,
            secret_key=S3_SECRET_KEY,
            region=S3_REGION,
            endpoint_override=f"http://{self.minio_cluster_ip}:9000",
            scheme="http",
            allow_bucket_creation=True,
        )


def install_storage(
    cluster: NodeCluster, namespace: str, image: BuiltImage, buckets: list[str]
) -> StorageServices:
    """MinIO (its static binary in an image of its own) and the Iceberg REST catalog (the
    classpath scripts/infra/services.sh fetched, run by the product image's Java) as pods."""
    cache = Path(cluster.kubectl_bin).resolve().parents[2]
    minio = _deployment(
        "minio",
        {
            "image": "icebergsync.local/minio:test",
            "imagePullPolicy": "Never",
            "args": ["server", "--quiet", "--address", ":9000", "--certs-dir", "/data/.certs", "/data"],
            "env": [
                {"name": "MINIO_ROOT_USER", "value": S3_ACCESS_KEY},
                {"name": "MINIO_ROOT_PASSWORD", "value": S3_SECRET_KEY},
                {"name": "MINIO_REGION", "value": S3_REGION},
                {"name": "MINIO_BROWSER", "value": "off"},
                {"name": "MINIO_UPDATE", "value": "off"},
                {"name": "MINIO_CI_CD", "value": "on"},
                {"name": "HOME", "value": "/data"},
            ],
            "readinessProbe": {"httpGet": {"path": "/minio/health/ready", "port": 9000}, "periodSeconds": 2},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        },
        [{"name": "data", "emptyDir": {}}],
    )
    catalog_properties = {
        "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "uri": "jdbc:sqlite:/work/catalog.db",
        "jdbc.schema-version": "V1",
        "warehouse": "s3://lake/warehouse",
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "s3.endpoint": f"http://minio.{namespace}.svc.cluster.local:9000",
        "s3.path-style-access": "true",
        "s3.access-key-id": S3_ACCESS_KEY,
        "s3.secret-access-key": S3_SECRET_KEY,
        "client.region": S3_REGION,
    }
    rest = _deployment(
        "rest",
        {
            "image": image.name,
            "imagePullPolicy": "Never",
            "command": ["java", "-Xmx384m", "-cp", "/opt/rest-catalog/classes:/opt/rest-catalog/lib/*"],
            "args": [
                "org.apache.iceberg.rest.LoopbackRESTCatalogServer",
                "0.0.0.0",
                "8181",
                *(f"{k}={v}" for k, v in catalog_properties.items()),
            ],
            "env": [{"name": "AWS_REGION", "value": S3_REGION}],
            "securityContext": {"runAsUser": 0},
            "readinessProbe": {"httpGet": {"path": "/v1/config", "port": 8181}, "periodSeconds": 2},
            "volumeMounts": [
                {"name": "classpath", "mountPath": "/opt/rest-catalog", "readOnly": True},
                {"name": "work", "mountPath": "/work"},
            ],
        },
        [
            {"name": "classpath", "hostPath": {"path": str(cache / "rest-catalog"), "type": "Directory"}},
            {"name": "work", "emptyDir": {}},
        ],
    )
    items = [minio, _service("minio", 9000), rest, _service("rest", 8181)]
    cluster.kubectl(
        "-n",
        namespace,
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    )
    cluster.kubectl("-n", namespace, "rollout", "status", "deployment/minio", "--timeout=300s", timeout=330)

    def cluster_ip(name: str) -> str:
        return cluster.kubectl("-n", namespace, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}")

    services = StorageServices(namespace, cluster_ip("minio"), cluster_ip("rest"))
    s3 = services.filesystem()

    def create_buckets() -> bool:
        for bucket in buckets:
            s3.create_dir(bucket)
        return True

    wait_for(f"buckets {buckets} on MinIO", create_buckets, 60)
    cluster.kubectl("-n", namespace, "rollout", "status", "deployment/rest", "--timeout=300s", timeout=330)
    return services


def helm_install_operator(cluster: NodeCluster, helm: Path, image: BuiltImage, watch_namespace: str,
                          extra_spark_conf: tuple[str, ...] = ()) -> None:
    """``helm install`` the chart: the operator Deployment from the built image, watching one
    namespace, with the chart's ServiceAccount + Role for Spark drivers there, and the chart's
    conf allow-list opened to ``extra_spark_conf`` as an admin would."""
    chart = REPO_ROOT / "charts" / "icebergsync"
    allowed = yaml.safe_load((chart / "values.yaml").read_text())["policy"]["allowedSparkConf"]
    installed = subprocess.run(
        [
            str(helm), "install", "icebergsync", str(chart),
            "--namespace", "icebergsync-system", "--create-namespace",
            "--set", f"image.repository={image.name.rsplit(':', 1)[0]}",
            "--set", f"image.tag={image.name.rsplit(':', 1)[1]}",
            "--set", "image.pullPolicy=Never",
            "--set", f"watchNamespaces={{{watch_namespace}}}",
            "--set", "sparkJob.serviceAccount.create=true",
            "--set", "operator.timerInterval=5s",
            "--set-json", f"policy.allowedSparkConf={json.dumps([*allowed, *extra_spark_conf])}",
            "--wait", "--timeout=10m",
        ],
        env=cluster.env, check=False, capture_output=True, text=True, timeout=700,
    )  # fmt: skip
    if installed.returncode != 0:
        raise RuntimeError(f"helm install failed ({installed.returncode}): {installed.stderr.strip() or installed.stdout}")
