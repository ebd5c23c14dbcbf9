"""The admin's policy on what a tenant may ask the Spark pods for (pure).

``spec.spark.image``, ``spec.spark.serviceAccount``, ``spec.spark.conf``, the pods' sizes and their
placement (PriorityClass, tolerations, labels, annotations) go into the SparkApplication, and the operator itself connects to ``spec.table.catalog.uri`` (parsed
by ``endpoints``: an ambiguous URI is refused even when every endpoint is allowed; whether the
operator may contact the catalog at all is the catalog's ``CatalogScope``, checked apart);
``policy_problems`` lists each one the operator's settings do not allow, so a refused spec is
never rendered nor its catalog contacted. Every default is closed: the operator's own image and
service account, named tuning conf keys (shell-style patterns, ``fnmatch``), capped sizes, no SQL
transform, no PriorityClass, toleration, pod label or annotation. A node selector or an affinity only
narrows where a pod may run, so it is not policed.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from icebergsync.spec import IcebergSync, Spark, SparkPod
from icebergsync.units import parse_jvm_memory
from icebergsync_operator.catalog_access import endpoint_problem
from icebergsync_operator.constants import PROTECTED_POD_LABELS, PROTECTED_SPARK_CONF
from icebergsync_operator.settings import ANY, OperatorSettings

GIB = 1024**3


def _matches(key: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(key, pattern) for pattern in patterns)


def _allowed(value: str | None, default: str | None, allowed: tuple[str, ...], prefix: bool = False) -> bool:
    """Unset, the operator's default, anything under ``*``, or listed (as a prefix, for images)."""
    if not value or value == default or ANY in allowed:
        return True
    return value.startswith(allowed) if prefix else value in allowed


def _besides(default: str | None, allowed: tuple[str, ...], listed: str) -> str:
    """What is allowed, in words: the operator's default and the admin's list."""
    parts = [f"the operator's default {default!r}"] if default else []
    if allowed:
        parts.append(f"{listed} {', '.join(map(repr, allowed))}")
    return " and ".join(parts) or "none"


def _size_problems(spark: Spark, settings: OperatorSettings) -> list[str]:
    """Executors, cores and memory of the whole sync (driver plus every executor) against the caps."""
    instances = spark.executor.instances
    problems = []
    if settings.max_executors and instances > settings.max_executors:
        problems.append(f"spec.spark.executor.instances: {instances} is above the cap of {settings.max_executors} "
                        "executors per sync (policy.maxExecutors)")
    cores = spark.driver.cores + instances * spark.executor.cores
    if settings.max_cores and cores > settings.max_cores:
        problems.append(f"spec.spark: {cores} cores in all (driver {spark.driver.cores} + {instances} x "
                        f"{spark.executor.cores}) is above the cap of {settings.max_cores} per sync (policy.maxCores)")
    memory = _pod_memory(spark.driver) + instances * _pod_memory(spark.executor)
    if settings.max_memory and memory > settings.max_memory:
        problems.append(f"spec.spark: {memory / GIB:.1f}Gi of memory in all (driver {_memory_words(spark.driver)} + "
                        f"{instances} x {_memory_words(spark.executor)}) is above the cap of "
                        f"{settings.max_memory / GIB:.1f}Gi per sync (policy.maxMemory)")
    return problems


def _pod_memory(pod: SparkPod) -> int:
    """A pod's heap and its explicit memory overhead, in bytes."""
    return parse_jvm_memory(pod.memory) + (parse_jvm_memory(pod.memory_overhead) if pod.memory_overhead else 0)


def _memory_words(pod: SparkPod) -> str:
    return f"{pod.memory}+{pod.memory_overhead} overhead" if pod.memory_overhead else pod.memory


def _placement_problems(role: str, pod: SparkPod, settings: OperatorSettings) -> list[str]:
    """What the policy refuses of one pod's placement: a PriorityClass, tolerations, labels and annotations
    each grant something (precedence, reserved nodes, a selector's trust) and are closed by default."""
    field = f"spec.spark.{role}"
    problems = []
    if pod.priority_class_name and not _allowed(pod.priority_class_name, None, settings.allowed_priority_classes):
        problems.append(f"{field}.priorityClassName: {pod.priority_class_name!r} is not allowed (allowed: "
                        f"{_besides(None, settings.allowed_priority_classes, 'the classes')}; "
                        "policy.allowedPriorityClasses)")
    for toleration in pod.tolerations:
        if toleration.key is None and ANY not in settings.allowed_tolerations:
            problems.append(f"{field}.tolerations: a toleration without a key tolerates every taint; only "
                            "policy.allowedTolerations [\"*\"] allows it")
        elif toleration.key is not None and not _matches(toleration.key, settings.allowed_tolerations):
            problems.append(f"{field}.tolerations: taint key {toleration.key!r} is not among the allowed "
                            "(policy.allowedTolerations)")
    for key in sorted(pod.labels):
        if _matches(key, PROTECTED_POD_LABELS):
            problems.append(f"{field}.labels: {key!r} is the operator's or Spark's own label and cannot be set")
        elif not _matches(key, settings.allowed_pod_labels):
            problems.append(f"{field}.labels: {key!r} is not among the allowed keys (policy.allowedPodLabels)")
    for key in sorted(pod.annotations):
        if not _matches(key, settings.allowed_pod_annotations):
            problems.append(f"{field}.annotations: {key!r} is not among the allowed keys "
                            "(policy.allowedPodAnnotations)")
    return problems


def catalog_uri_field(sync: IcebergSync) -> str:
    """Where the user wrote the catalog's URI: inline, or in the catalog resource the sync names."""
    ref = sync.spec.table.catalog_ref
    return "spec.table.catalog.uri" if ref is None else f"spec.table.catalogRef ({ref.kind} {ref.name!r}, spec.uri)"


def policy_problems(sync: IcebergSync, settings: OperatorSettings,
                    catalog_field: str = "spec.table.catalog.uri") -> tuple[str, ...]:
    """Every field of the spec the operator's policy refuses, with why; empty when allowed.

    ``sync`` has its catalog inline (a catalogRef resolved); ``catalog_field`` names where its URI came from.
    """
    spark = sync.spec.spark
    problems = []
    if not _allowed(spark.image, settings.default_image, settings.allowed_images, prefix=True):
        problems.append(f"spec.spark.image: {spark.image!r} is not allowed (allowed: "
                        f"{_besides(settings.default_image, settings.allowed_images, 'images starting with')}; "
                        "policy.allowedImages)")
    account = spark.service_account
    if not _allowed(account, settings.default_service_account, settings.allowed_service_accounts):
        problems.append(f"spec.spark.serviceAccount: {account!r} is not allowed (allowed: "
                        f"{_besides(settings.default_service_account, settings.allowed_service_accounts, 'the accounts')}; "
                        "policy.allowedServiceAccounts)")
    for key in sorted(spark.conf):
        if _matches(key, PROTECTED_SPARK_CONF):
            problems.append(f"spec.spark.conf: {key!r} is set by the operator for every sync (Spark's RPC is "
                            "authenticated and encrypted, the UI cannot kill) and cannot be changed")
        elif not _matches(key, settings.allowed_spark_conf):
            problems.append(f"spec.spark.conf: {key!r} is not among the allowed keys (policy.allowedSparkConf)")
    problems += _size_problems(spark, settings)
    problems += _placement_problems("driver", spark.driver, settings)
    problems += _placement_problems("executor", spark.executor, settings)
    if sync.spec.transform and not settings.allow_transform:
        problems.append("spec.transform: SQL transforms are not allowed (policy.allowTransform): Spark SQL can call "
                        "Java methods and read the job's local files, which is running code as the job")
    endpoint = endpoint_problem(sync.spec.table.catalog_or_default)
    if endpoint:
        problems.append(f"{catalog_field}: {endpoint}")
    return tuple(problems)
