"""Pure renderers: the SparkApplication and the spec ConfigMap for one version of a sync.

Each version gets its own immutable ConfigMap named by a hash of its content, so a running
application never sees a spec that changes under it, and a ConfigMap left from an earlier failed
launch can never stand in for a different spec. Secrets are referenced by name and mounted by Spark
(``driver.secrets`` become ``spark.kubernetes.*.secrets.*`` conf); their values never appear in
what is rendered here.

The application needs no Spark Operator webhook: what Spark's own conf cannot express (the spec
ConfigMap volume, the security context) is in the driver and executor pod templates
(``spec.driver.template`` / ``spec.executor.template``), which the Spark Operator hands to
spark-submit as pod template files. Fields such as ``driver.configMaps`` or
``driver.securityContext`` would only take effect through the operator's mutating webhook.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import yaml

from icebergsync.cli import run_arguments
from icebergsync.spark_conf import spark_conf
from icebergsync.spec import IcebergSync, SparkPod
from icebergsync_operator.constants import (
    APPLICATION_LABEL,
    CLUSTER_SPARK_CONF,
    GENERATION_ANNOTATION,
    MAIN_APPLICATION_FILE,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    SECRETS_MOUNT_DIR,
    SINK_ID_ANNOTATION,
    SINK_VERSION_LABEL,
    SPARK_GROUP,
    SPARK_KIND,
    SPARK_VERSION,
    SPEC_FILE_NAME,
    SPEC_MOUNT_DIR,
    SYNC_GROUP,
    SYNC_KIND,
    SYNC_LABEL,
    SYNC_VERSION,
)
from icebergsync_operator.secret_refs import named_secrets
from icebergsync_operator.settings import OperatorSettings

# The Spark Operator derives pod and service names from the application name (e.g. "<app>-ui-svc",
# at most 63 characters), so application names stay well below that.
MAX_APPLICATION_NAME = 50
SPEC_PATH = f"{SPEC_MOUNT_DIR}/{SPEC_FILE_NAME}"
# Container names Spark looks for in a pod template (spark.kubernetes.*.podTemplateContainerName,
# set so by the Spark Operator).
DRIVER_CONTAINER = "spark-kubernetes-driver"
METRICS_PORT_NAME = "metrics"  # the driver's container port the chart's PodMonitor scrapes
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
SPEC_VOLUME = "icebergsync-spec"
# The image's `spark` user (uid 185), never root, default seccomp; no privilege escalation, no capabilities.
POD_SECURITY_CONTEXT: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": 185, "runAsGroup": 185,
                                        "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                              "readOnlyRootFilesystem": True}
# The root filesystem is read-only: an emptyDir wherever Spark, the JVM or Python write. /tmp (the JVM's
# and Python's temp files, hsperfdata) and the image's working directory, which is also the `spark` user's
# HOME (ivy cache, files fetched by executors, spark-warehouse). Spark's local dirs are emptyDirs Spark adds.
SCRATCH_DIRS = {"scratch-tmp": "/tmp", "scratch-work-dir": "/opt/icebergsync/work-dir"}


def application_name(sync_name: str, version: int) -> str:
    """``<sync>-v<version>``; long sync names are cut and made unique again with a short hash."""
    suffix = f"-v{version}"
    name = f"{sync_name}{suffix}"
    if len(name) <= MAX_APPLICATION_NAME:
        return name
    digest = hashlib.sha256(sync_name.encode()).hexdigest()[:6]
    head = sync_name[: MAX_APPLICATION_NAME - len(suffix) - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}{suffix}"


def configmap_name(application: str, content: str) -> str:
    """``<application>-spec-<hash of content>``: the only place a spec ConfigMap's name is made."""
    return f"{application}-spec-{hashlib.sha256(content.encode()).hexdigest()[:10]}"


def labels(sync_name: str, version: int) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY, SYNC_LABEL: sync_name, SINK_VERSION_LABEL: str(version)}


def owner_reference(sync_name: str, sync_uid: str) -> dict[str, Any]:
    """Controller owner reference to the IcebergSync."""
    return {
        "apiVersion": f"{SYNC_GROUP}/{SYNC_VERSION}",
        "kind": SYNC_KIND,
        "name": sync_name,
        "uid": sync_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def spec_document(sync_name: str, namespace: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The IcebergSync document the job reads: identity and spec only, never status."""
    return {
        "apiVersion": f"{SYNC_GROUP}/{SYNC_VERSION}",
        "kind": SYNC_KIND,
        "metadata": {"name": sync_name, "namespace": namespace},
        "spec": dict(spec),
    }


def _metadata(sync: IcebergSync, name: str, version: int, generation: int, sync_uid: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": sync.metadata.namespace,
        "labels": labels(sync.metadata.name, version),
        "annotations": {GENERATION_ANNOTATION: str(generation), SINK_ID_ANNOTATION: sync.sink_id},
        "ownerReferences": [owner_reference(sync.metadata.name, sync_uid)],
    }


def build_spec_configmap(sync: IcebergSync, raw_spec: Mapping[str, Any], version: int, generation: int,
                         sync_uid: str) -> dict[str, Any]:
    """The immutable ConfigMap holding this version's spec, mounted at /etc/icebergsync/spec/.

    ``raw_spec`` is the spec as stored by the API server (with its defaults, its catalogRef resolved), written verbatim.
    Its name carries a hash of that content, and its application label names the application
    that mounts it (cleanup selects by that label).
    """
    document = yaml.safe_dump(spec_document(sync.metadata.name, sync.metadata.namespace, raw_spec), sort_keys=False)
    application = application_name(sync.metadata.name, version)
    metadata = _metadata(sync, configmap_name(application, document), version, generation, sync_uid)
    metadata["labels"][APPLICATION_LABEL] = application
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "immutable": True,
            "data": {SPEC_FILE_NAME: document}}


def secret_names(sync: IcebergSync) -> list[str]:
    """Every Secret the spec references, each once, in a stable order."""
    return sorted({secret.name for secret in named_secrets(sync)})


def pod_template(spec_configmap: str, container: str, placement: SparkPod, *, api_token: bool) -> dict[str, Any]:
    """The pod template of a driver or executor: the spec ConfigMap mounted read-only at
    ``SPEC_MOUNT_DIR``, scratch emptyDirs, the security context, the service-account token only
    with ``api_token`` (the driver creates its executors; executors never call the API), and the
    pod's ``placement`` (node selector, tolerations, affinity, PriorityClass, labels, annotations),
    which Spark keeps from the template. Spark adds image, resources, env and its own volumes."""
    mounts = [{"name": SPEC_VOLUME, "mountPath": SPEC_MOUNT_DIR, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": SPEC_VOLUME, "configMap": {"name": spec_configmap}}]
    for name, path in SCRATCH_DIRS.items():
        mounts.append({"name": name, "mountPath": path})
        volumes.append({"name": name, "emptyDir": {}})
    spec: dict[str, Any] = {
        "automountServiceAccountToken": api_token,
        "securityContext": POD_SECURITY_CONTEXT,
        "containers": [{"name": container, "securityContext": CONTAINER_SECURITY_CONTEXT, "volumeMounts": mounts}],
        "volumes": volumes,
    }
    if placement.node_selector:
        spec["nodeSelector"] = dict(placement.node_selector)
    if placement.tolerations:
        spec["tolerations"] = [toleration.as_kubernetes() for toleration in placement.tolerations]
    if placement.affinity:
        spec["affinity"] = placement.affinity.model_dump(by_alias=True, exclude_none=True)
    if placement.priority_class_name:
        spec["priorityClassName"] = placement.priority_class_name
    metadata = {key: dict(value) for key, value in (("labels", placement.labels),
                                                     ("annotations", placement.annotations)) if value}
    return {"metadata": metadata, "spec": spec} if metadata else {"spec": spec}


def expose_metrics(template: dict[str, Any], port: int) -> None:
    """Declare the job's metrics port on the driver's pod template: the container port named ``metrics`` (what the
    chart's PodMonitor scrapes) and the ``prometheus.io/*`` annotations (for annotation-based scraping)."""
    template.setdefault("metadata", {}).setdefault("annotations", {}).update({
        "prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"})
    [container] = template["spec"]["containers"]
    container["ports"] = [{"name": METRICS_PORT_NAME, "containerPort": port, "protocol": "TCP"}]


def _pod(sync: IcebergSync, version: int, placement: SparkPod, spec_configmap: str, container: str
         ) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "cores": placement.cores,
        "memory": placement.memory,
        "labels": labels(sync.metadata.name, version),
        "template": pod_template(spec_configmap, container, placement, api_token=container == DRIVER_CONTAINER),
    }
    secrets = [{"name": name, "path": f"{SECRETS_MOUNT_DIR}/{name}", "secretType": "Generic"}
               for name in secret_names(sync)]
    if secrets:
        pod["secrets"] = secrets
    return pod


def build_spark_application(sync: IcebergSync, version: int, generation: int, sync_uid: str,
                            settings: OperatorSettings, spec_configmap: str) -> dict[str, Any]:
    """The SparkApplication (sparkoperator.k8s.io/v1beta2) running ``version`` of the sync.

    ``spec_configmap`` is the name of the ConfigMap from ``build_spec_configmap`` it mounts.
    The Spark Operator never restarts it (restartPolicy Never): a relaunch is always a new
    version decided by this operator, so that the new job fences the old one.
    """
    spark = sync.spec.spark
    driver = _pod(sync, version, spark.driver, spec_configmap, DRIVER_CONTAINER)
    if sync.spec.metrics.enabled:
        expose_metrics(driver["template"], sync.spec.metrics.port)
    service_account = spark.service_account or settings.default_service_account
    if service_account:
        driver["serviceAccount"] = service_account
    executor = {**_pod(sync, version, spark.executor, spec_configmap, EXECUTOR_CONTAINER),
                "instances": spark.executor.instances}
    spec: dict[str, Any] = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": spark.image or settings.default_image,
        "mainApplicationFile": MAIN_APPLICATION_FILE,
        "arguments": run_arguments(SPEC_PATH, version, master=""),
        "sparkVersion": settings.spark_version,
        "restartPolicy": {"type": "Never"},
        "driver": driver,
        "executor": executor,
    }
    spec["sparkConf"] = {**spark_conf(sync.spec), **CLUSTER_SPARK_CONF}
    return {
        "apiVersion": f"{SPARK_GROUP}/{SPARK_VERSION}",
        "kind": SPARK_KIND,
        "metadata": _metadata(sync, application_name(sync.metadata.name, version), version, generation, sync_uid),
        "spec": spec,
    }
