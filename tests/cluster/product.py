"""The product installed on the one-node cluster the way users install it, for the end-to-end
tier: the image loaded into containerd, MinIO and an Iceberg REST catalog as pods, the chart
installed with ``helm install``, the real Spark Operator controller beside the API server, and (for
Kafka syncs) a KRaft Kafka broker as a pod.

The host reaches the in-cluster Services by ClusterIP (cluster.sh routes the Service network to
the node), so tests read the table with pyiceberg exactly as the pods see it, and produce to the
broker at the address it advertises to the pods.

:func:`installed_product` is one module's whole installation, undone when the module ends (the
syncs, the chart, the namespace), so the modules of the tier share the session's one cluster.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.infra.cluster import ClusterError, NodeCluster
from tests.infra.image import BUILD_TIMEOUT, IMAGE_SCRIPT, BuiltImage, run_script
from tests.infra.kube import ensure_kube_tools
from tests.infra.services import SINGLE_BROKER_PROPERTIES, _kafka_cluster_id
from tests.infra.spark_operator import SparkOperatorController, start_spark_operator

REPO_ROOT = Path(__file__).resolve().parents[2]
S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION = "icebergsync", "icebergsync-secret", "us-east-1"
RELEASE, OPERATOR_NAMESPACE = "icebergsync", "icebergsync-system"
CATALOG, S3_SECRET = "lake", "s3"
# Two cores for everything on this node: the syncs request a tenth of one per Spark pod (keys the
# admin opens: the chart's default allow-list has no pod resources).
CORE_REQUESTS = ("spark.kubernetes.driver.request.cores", "spark.kubernetes.executor.request.cores")
KAFKA_PORT = 9092
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


_imported: set[tuple[Path, Path]] = set()


def import_image_once(cluster: NodeCluster, image: BuiltImage) -> None:
    """Load the image into the node's containerd, once per cluster of this session."""
    key = (cluster.state_dir, saved_image(image))
    if key not in _imported:
        cluster.import_images([key[1]])
        _imported.add(key)


def _cache_dir(cluster: NodeCluster) -> Path:
    """The suite's cache (``$ICEBERGSYNC_CACHE``), where the pinned kubectl lives too."""
    return Path(cluster.kubectl_bin).resolve().parents[2]


def _apply(cluster: NodeCluster, namespace: str, items: list[dict[str, Any]]) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-",
                    stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


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
    cache = _cache_dir(cluster)
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
    _apply(cluster, namespace, [minio, _service("minio", 9000), rest, _service("rest", 8181)])
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
                          allowed_catalog_uris: tuple[str, ...], extra_spark_conf: tuple[str, ...] = ()) -> None:
    """``helm install`` the chart: the operator Deployment from the built image, watching one
    namespace, with the chart's ServiceAccount + Role for Spark drivers there, the catalog endpoints
    the operator may contact (``operator.allowedCatalogUris``: none by default) and the chart's
    conf allow-list opened to ``extra_spark_conf``, as an admin would."""
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
            "--set-json", f"operator.allowedCatalogUris={json.dumps(list(allowed_catalog_uris))}",
            "--wait", "--timeout=10m",
        ],
        env=cluster.env, check=False, capture_output=True, text=True, timeout=700,
    )  # fmt: skip
    if installed.returncode != 0:
        raise RuntimeError(f"helm install failed ({installed.returncode}): {installed.stderr.strip() or installed.stdout}")


def helm_uninstall_operator(cluster: NodeCluster, helm: Path) -> None:
    """``helm uninstall`` the chart (its CRDs stay, as for users), waiting until its objects are gone."""
    uninstalled = subprocess.run(
        [str(helm), "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait", "--timeout=5m"],
        env=cluster.env, check=False, capture_output=True, text=True, timeout=330,
    )  # fmt: skip
    if uninstalled.returncode != 0:
        raise RuntimeError(f"helm uninstall failed ({uninstalled.returncode}): {uninstalled.stderr.strip()}")


def catalog_document(storage: StorageServices) -> dict[str, Any]:
    """The IcebergCatalog the syncs name: the REST catalog pod, its warehouse on MinIO, the s3 Secret."""
    return {
        "apiVersion": "icebergsync.io/v1alpha1",
        "kind": "IcebergCatalog",
        "metadata": {"name": CATALOG, "namespace": storage.namespace},
        "spec": {
            "type": "rest",
            "uri": storage.rest_uri_in_cluster,
            "warehouse": "s3://lake/warehouse",
            "properties": {"s3.endpoint": storage.s3_endpoint_in_cluster, "s3.region": S3_REGION,
                           "s3.path-style-access": "true"},
            "secretRef": {"name": S3_SECRET},
        },
    }


def small_spark() -> dict[str, Any]:
    """``spec.spark`` of a sync on this node: one small driver, one small executor, a tenth of a core each."""
    return {
        "driver": {"memory": "768m"},
        "executor": {"instances": 1, "memory": "768m"},
        "conf": {key: "100m" for key in CORE_REQUESTS},
    }


@dataclass
class Product:
    """One module's installation: the operator watching ``namespace``, MinIO and the REST catalog there
    (an IcebergCatalog ``lake`` and the Secret ``s3`` naming them), the Spark Operator controller."""

    cluster: NodeCluster
    namespace: str
    storage: StorageServices
    spark_operator: SparkOperatorController
    image: BuiltImage

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120.0) -> str:
        """kubectl in the product's namespace."""
        return self.cluster.kubectl("-n", self.namespace, *args, stdin=stdin, timeout=timeout)

    def apply(self, document: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=json.dumps(document))

    def sync(self, name: str) -> dict[str, Any]:
        return json.loads(self.kubectl("get", "isync", name, "-o", "json"))

    def pods(self, selector: str) -> list[dict[str, Any]]:
        return json.loads(self.kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]

    def catalog(self, name: str = "e2e") -> Any:
        """The REST catalog, read from the host with pyiceberg."""
        from pyiceberg.catalog import load_catalog

        return load_catalog(name, **self.storage.host_catalog_properties())


ChartInstall = Callable[[Path, StorageServices], None]


@contextmanager
def installed_product(cluster: NodeCluster, image: BuiltImage, namespace: str, buckets: list[str],
                      work_dir: Path, install_chart: ChartInstall | None = None) -> Iterator[Product]:
    """Install the product as users do (see the module docstring) for ``namespace``; when the block
    ends, delete its syncs (their applications with them), stop the Spark Operator controller,
    ``helm uninstall`` the chart and delete the namespace, so the next module installs afresh.

    ``install_chart(helm, storage)``, when given, installs the chart its own way, and the test applies
    its catalog and Secret itself; by default the chart is installed by :func:`helm_install_operator`
    and the IcebergCatalog ``lake`` with its Secret ``s3`` are applied."""
    tools = ensure_kube_tools()
    for crd in tools.spark_operator_crds:
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
    import_image_once(cluster, image)
    cluster.kubectl("create", "namespace", namespace)
    controller: SparkOperatorController | None = None
    try:
        storage = install_storage(cluster, namespace, image, buckets=buckets)
        if install_chart is not None:
            install_chart(tools.helm, storage)
        else:
            helm_install_operator(cluster, tools.helm, image, namespace,
                                  (storage.rest_uri_in_cluster, storage.s3_endpoint_in_cluster),
                                  extra_spark_conf=CORE_REQUESTS)
        for crd in tools.spark_operator_crds:
            cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crd))
        controller = start_spark_operator(cluster.kubeconfig, cluster.server, work_dir, [namespace])
        product = Product(cluster, namespace, storage, controller, image)
        if install_chart is None:
            product.apply({
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": S3_SECRET},
                "stringData": {"s3.access-key-id": S3_ACCESS_KEY, "s3.secret-access-key": S3_SECRET_KEY},
            })  # fmt: skip
            product.apply(catalog_document(storage))
        yield product
    finally:
        _uninstall(cluster, tools.helm, namespace, controller)


def _uninstall(cluster: NodeCluster, helm: Path, namespace: str, controller: SparkOperatorController | None) -> None:
    """Undo :func:`installed_product`, in the order the finalizers need: the syncs and catalogs while the
    operator runs (its finalizer on both; it deletes the syncs' SparkApplications), the applications while
    the Spark Operator runs (its finalizer), then the controller, the chart and the namespace."""
    try:
        for kind in ("isync", "icebergcatalogs", "sparkapplications"):
            try:
                cluster.kubectl("-n", namespace, "delete", kind, "--all", "--timeout=300s", timeout=330)
            except ClusterError as exc:
                if "doesn't have a resource type" not in str(exc):  # the install failed before its CRD
                    raise
    finally:
        if controller is not None:
            controller.stop()
        try:
            try:
                helm_uninstall_operator(cluster, helm)
            except RuntimeError as exc:
                if "not found" not in str(exc):  # the install failed before the chart
                    raise
        finally:
            cluster.kubectl("delete", "namespace", namespace, "--timeout=300s", timeout=330)


# --------------------------------------------------------------------------------------------
# Kafka as a pod


@dataclass(frozen=True)
class KafkaService:
    """A single-node KRaft broker+controller (the classpath scripts/infra/services.sh fetched, run by the
    product image's Java) behind the Service ``kafka``. It advertises the Service's ClusterIP, which the
    pods reach through kube-proxy and the host through the node's route to the Service network, so
    the test produces from the host to the very address the sync's tasks read from."""

    namespace: str
    cluster_ip: str

    @property
    def bootstrap_in_cluster(self) -> str:
        return f"kafka.{self.namespace}.svc.cluster.local:{KAFKA_PORT}"

    @property
    def bootstrap_from_host(self) -> str:
        return f"{self.cluster_ip}:{KAFKA_PORT}"

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap_from_host})

    def topics(self) -> set[str]:
        return set(self._admin().list_topics(timeout=15).topics)

    def create_topic(self, name: str, partitions: int = 2) -> None:
        """Create a topic (replication 1) and wait until every partition has a leader."""
        from confluent_kafka.admin import NewTopic

        admin = self._admin()
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=60)

        def led() -> bool:
            topic = admin.list_topics(topic=name, timeout=15).topics.get(name)
            return (topic is not None and topic.error is None and len(topic.partitions) == partitions
                    and all(p.leader >= 0 for p in topic.partitions.values()))

        wait_for(f"leaders of topic {name}", led, 60, interval=1)

    def produce(self, topic: str, records: list[tuple[str, str]]) -> None:
        """Produce ``(key, value)`` records (idempotent, acks=all) and wait until every one is acknowledged."""
        from confluent_kafka import Producer

        failed: list[str] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                failed.append(str(error))

        producer = Producer({"bootstrap.servers": self.bootstrap_from_host, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5})
        for key, value in records:
            producer.produce(topic, value=value.encode(), key=key.encode(), on_delivery=delivered)
            producer.poll(0)
        left = producer.flush(60)
        if left or failed:
            raise RuntimeError(f"producing to {topic}: {left} record(s) unacknowledged, errors {failed[:3]}")


def install_kafka(cluster: NodeCluster, namespace: str, image: BuiltImage) -> KafkaService:
    """The broker as a pod (see :class:`KafkaService`): its storage formatted at start (``--ignore-formatted``:
    a restarted container keeps its log), its controller on the pod's loopback."""
    _apply(cluster, namespace, [_service("kafka", KAFKA_PORT)])
    cluster_ip = cluster.kubectl("-n", namespace, "get", "service", "kafka", "-o", "jsonpath={.spec.clusterIP}")
    properties = "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        "controller.quorum.voters=1@127.0.0.1:9093",
        f"listeners=PLAINTEXT://0.0.0.0:{KAFKA_PORT},CONTROLLER://127.0.0.1:9093",
        f"advertised.listeners=PLAINTEXT://{cluster_ip}:{KAFKA_PORT}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs=/data/kafka",
        *SINGLE_BROKER_PROPERTIES,
        "",
    ])  # fmt: skip
    log4j = "\n".join([
        "appender.err.type = Console", "appender.err.name = STDERR", "appender.err.target = SYSTEM_ERR",
        "appender.err.layout.type = PatternLayout", "appender.err.layout.pattern = [%d] %p %m (%c)%n",
        "rootLogger.level = INFO", "rootLogger.appenderRef.err.ref = STDERR", "",
    ])  # fmt: skip
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kafka"},
              "data": {"server.properties": properties, "log4j2.properties": log4j}}
    java = 'java -XX:+UseSerialGC -Djava.awt.headless=true -cp "/opt/kafka/lib/*"'
    start = (f"{java} -Xmx256m kafka.tools.StorageTool format --ignore-formatted -t {_kafka_cluster_id()} "
             "-c /etc/kafka/server.properties && "
             f"exec {java} -Xms256m -Xmx512m -Dlog4j2.configurationFile=/etc/kafka/log4j2.properties "
             "kafka.Kafka /etc/kafka/server.properties")
    broker = _deployment(
        "kafka",
        {
            "image": image.name,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", start],
            "securityContext": {"runAsUser": 0},
            "readinessProbe": {"tcpSocket": {"port": KAFKA_PORT}, "periodSeconds": 2},
            "volumeMounts": [
                {"name": "classpath", "mountPath": "/opt/kafka", "readOnly": True},
                {"name": "config", "mountPath": "/etc/kafka", "readOnly": True},
                {"name": "data", "mountPath": "/data"},
            ],
        },
        [
            {"name": "classpath", "hostPath": {"path": str(_cache_dir(cluster) / "kafka"), "type": "Directory"}},
            {"name": "config", "configMap": {"name": "kafka"}},
            {"name": "data", "emptyDir": {}},
        ],
    )
    _apply(cluster, namespace, [config, broker])
    cluster.kubectl("-n", namespace, "rollout", "status", "deployment/kafka", "--timeout=300s", timeout=330)
    kafka = KafkaService(namespace, cluster_ip)
    wait_for("the broker to answer the host", lambda: kafka.topics() is not None, 120)
    return kafka
