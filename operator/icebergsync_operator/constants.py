"""Names shared by the operator's modules: API coordinates, labels, annotations, mount paths, states."""

from __future__ import annotations

from icebergsync.catalog import DEFAULT_SECRETS_DIR
from icebergsync.crd import PLURAL
from icebergsync.spec import API_GROUP, API_VERSION, KIND

SYNC_GROUP = API_GROUP
SYNC_VERSION = API_VERSION
SYNC_PLURAL = PLURAL
SYNC_KIND = KIND

SPARK_GROUP = "sparkoperator.k8s.io"
SPARK_VERSION = "v1beta2"
SPARK_PLURAL = "sparkapplications"
SPARK_KIND = "SparkApplication"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "icebergsync"
SYNC_LABEL = f"{API_GROUP}/sync"
SINK_VERSION_LABEL = f"{API_GROUP}/sink-version"
APPLICATION_LABEL = f"{API_GROUP}/application"
GENERATION_ANNOTATION = f"{API_GROUP}/generation"
SINK_ID_ANNOTATION = f"{API_GROUP}/sink-id"

FINALIZER = f"{API_GROUP}/finalizer"
KOPF_STORAGE_PREFIX = f"kopf.{API_GROUP}"
FIELD_MANAGER = "icebergsync-operator"
COMPONENT = "icebergsync-operator"

MAIN_APPLICATION_FILE = "local:///opt/icebergsync/spark_app/main.py"
SPEC_MOUNT_DIR = "/etc/icebergsync/spec"
SPEC_FILE_NAME = "sync.yaml"
SECRETS_MOUNT_DIR = DEFAULT_SECRETS_DIR

# Spark Operator v1beta2 status.applicationState.state values, grouped by what they mean for us.
FAILED_STATES = frozenset({"FAILED", "SUBMISSION_FAILED"})
COMPLETED_STATES = frozenset({"COMPLETED"})
RUNNING_STATES = frozenset({"RUNNING", "SUCCEEDING", "FAILING"})
# Anything else ("", SUBMITTED, PENDING_RERUN, INVALIDATING, UNKNOWN) is still starting.

# Every pod of the cluster can reach a driver's service. Spark's RPC and block transfers are
# authenticated with a secret Spark generates per application (handed to the executors it creates in
# an environment variable) and encrypted (AES-GCM), so no other pod can join the application as an
# executor (it would receive tasks carrying the catalog's credentials) or fetch its blocks; the Spark
# UI, which nothing authenticates, cannot kill stages. Rendered after spec.spark.conf, and no spec
# may set these keys nor any key under them, whatever policy.allowedSparkConf says
# (docs/security.md, attack 17).
CLUSTER_SPARK_CONF = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true",
                      "spark.ui.killEnabled": "false"}
PROTECTED_SPARK_CONF = ("spark.authenticate*", "spark.network.crypto.*", "spark.ui.killEnabled")
# Pod labels the operator, Spark and the Spark Operator select pods by: never a tenant's, whatever the policy.
PROTECTED_POD_LABELS = (f"{API_GROUP}/*", MANAGED_BY_LABEL, "spark-*", "sparkoperator.k8s.io/*")
