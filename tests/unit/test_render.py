"""Pure renderers and parsers of the operator: SparkApplication, spec ConfigMap, settings, app states."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from icebergsync_operator.applications import Outcome, parse_application
from icebergsync_operator.render import (
    MAX_APPLICATION_NAME,
    application_name,
    build_spark_application,
    build_spec_configmap,
    configmap_name,
    secret_names,
)
from icebergsync_operator.settings import OperatorSettings, parse_settings

from icebergsync.cli import build_parser, run_arguments
from icebergsync.spec import IcebergSync, parse_spec
from spark_app.cli import add_run_command

UID = "0b0e5d6c-1111-2222-3333-444455556666"
SETTINGS = OperatorSettings(default_image="registry.example/icebergsync:test", default_service_account="spark")
CONFIGMAP = "trips-v4-spec-0123456789"


def _document(**spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": "trips", "secretRef": {"name": "kafka-creds"}}},
        "schema": [{"name": "id", "type": "long"}, {"name": "ts", "type": "timestamp"}],
        "table": {"name": "db.trips", "catalog": {"type": "rest", "uri": "http://rest:8181",
                                                  "secretRef": {"name": "catalog-creds"}}},
        "spark": {"driver": {"cores": 2, "memory": "2g"}, "executor": {"cores": 3, "memory": "4g", "instances": 5},
                  "conf": {"spark.sql.shuffle.partitions": "8"}},
    }
    spec.update(spec_overrides)
    return {"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
            "metadata": {"name": "trips", "namespace": "data"}, "spec": spec}


def _sync(**spec_overrides: Any) -> IcebergSync:
    return parse_spec(_document(**spec_overrides))


# Spark's RPC authenticated and encrypted, the UI unable to kill: in every application (docs/security.md).
CLUSTER = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true", "spark.ui.killEnabled": "false"}
QUICK_JIT = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
             "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


def test_application_names_are_deterministic_per_version() -> None:
    assert application_name("trips", 1) == "trips-v1"
    assert application_name("trips", 12) == "trips-v12"


def test_long_sync_names_are_cut_and_kept_unique() -> None:
    first, second = "a" * 60, "a" * 59 + "b"
    names = {application_name(first, 7), application_name(second, 7)}
    assert len(names) == 2
    for name in names:
        assert len(name) <= MAX_APPLICATION_NAME
        assert name.endswith("-v7")
    assert application_name(first, 7) == application_name(first, 7)


def test_spark_application_runs_the_job_entry_point_with_the_version() -> None:
    app = build_spark_application(_sync(), 4, generation=9, sync_uid=UID, settings=SETTINGS, spec_configmap=CONFIGMAP)
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    assert app["kind"] == "SparkApplication"
    spec = app["spec"]
    assert spec["type"] == "Python"
    assert spec["mode"] == "cluster"
    assert spec["mainApplicationFile"] == "local:///opt/icebergsync/spark_app/main.py"
    assert spec["arguments"] == ["run", "/etc/icebergsync/spec/sync.yaml", "--sink-version", "4", "--master", ""]
    job_args = build_parser(extra_commands=(add_run_command,)).parse_args(spec["arguments"])
    assert (job_args.spec, job_args.sink_version, job_args.master) == ("/etc/icebergsync/spec/sync.yaml", 4, "")
    assert spec["restartPolicy"] == {"type": "Never"}
    assert spec["sparkVersion"] == SETTINGS.spark_version
    assert spec["image"] == "registry.example/icebergsync:test"
    assert spec["sparkConf"] == {"spark.sql.shuffle.partitions": "8", **QUICK_JIT, **CLUSTER}


def test_spark_application_metadata_owner_and_labels() -> None:
    metadata = build_spark_application(_sync(), 4, generation=9, sync_uid=UID, settings=SETTINGS, spec_configmap=CONFIGMAP)["metadata"]
    assert metadata["name"] == "trips-v4"
    assert metadata["namespace"] == "data"
    assert metadata["labels"] == {"app.kubernetes.io/managed-by": "icebergsync", "icebergsync.io/sync": "trips",
                                  "icebergsync.io/sink-version": "4"}
    assert metadata["annotations"] == {"icebergsync.io/generation": "9", "icebergsync.io/sink-id": "data/trips"}
    assert metadata["ownerReferences"] == [{
        "apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "name": "trips", "uid": UID,
        "controller": True, "blockOwnerDeletion": True,
    }]


def test_resources_service_account_and_mounts_on_driver_and_executors() -> None:
    spec = build_spark_application(_sync(), 4, generation=9, sync_uid=UID, settings=SETTINGS, spec_configmap=CONFIGMAP)["spec"]
    driver, executor = spec["driver"], spec["executor"]
    assert (driver["cores"], driver["memory"], driver["serviceAccount"]) == (2, "2g", "spark")
    assert (executor["cores"], executor["memory"], executor["instances"]) == (3, "4g", 5)
    assert "instances" not in driver
    for pod, container in ((driver, "spark-kubernetes-driver"), (executor, "spark-kubernetes-executor")):
        template = pod["template"]["spec"]
        assert template["volumes"] == [{"name": "icebergsync-spec", "configMap": {"name": CONFIGMAP}},
                                       {"name": "scratch-tmp", "emptyDir": {}},
                                       {"name": "scratch-work-dir", "emptyDir": {}}]
        assert [c["name"] for c in template["containers"]] == [container]
        assert template["containers"][0]["volumeMounts"] == [
            {"name": "icebergsync-spec", "mountPath": "/etc/icebergsync/spec", "readOnly": True},
            {"name": "scratch-tmp", "mountPath": "/tmp"},
            {"name": "scratch-work-dir", "mountPath": "/opt/icebergsync/work-dir"}]
        assert pod["secrets"] == [
            {"name": "catalog-creds", "path": "/etc/icebergsync/secrets/catalog-creds", "secretType": "Generic"},
            {"name": "kafka-creds", "path": "/etc/icebergsync/secrets/kafka-creds", "secretType": "Generic"},
        ]
        assert pod["labels"]["icebergsync.io/sink-version"] == "4"


def test_pods_need_no_spark_operator_webhook() -> None:
    """Only fields that spark-submit applies by itself: mounts and security context are in the pod
    templates; the webhook-only fields (configMaps, volumes, securityContext, ...) are unused."""
    spec = build_spark_application(_sync(), 4, generation=9, sync_uid=UID, settings=SETTINGS, spec_configmap=CONFIGMAP)["spec"]
    webhook_only = {"configMaps", "volumeMounts", "securityContext", "podSecurityContext", "env", "envFrom",
                    "affinity", "tolerations", "sidecars", "initContainers", "hostNetwork", "dnsConfig"}
    assert "volumes" not in spec
    for pod in (spec["driver"], spec["executor"]):
        assert not webhook_only & set(pod)
        template = pod["template"]["spec"]
        assert template["securityContext"] == {"runAsNonRoot": True, "runAsUser": 185, "runAsGroup": 185,
                                               "seccompProfile": {"type": "RuntimeDefault"}}
        assert template["containers"][0]["securityContext"] == {
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}


def test_only_the_driver_mounts_a_service_account_token() -> None:
    """The driver creates its executors through the API; executors never call it (docs/security.md)."""
    spec = build_spark_application(_sync(), 4, generation=9, sync_uid=UID, settings=SETTINGS, spec_configmap=CONFIGMAP)["spec"]
    assert spec["driver"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert spec["executor"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_the_driver_pod_declares_the_metrics_port_the_pod_monitor_scrapes() -> None:
    spec = build_spark_application(_sync(metrics={"port": 9108}), 4, generation=9, sync_uid=UID, settings=SETTINGS,
                                   spec_configmap=CONFIGMAP)["spec"]
    driver = spec["driver"]["template"]
    assert driver["spec"]["containers"][0]["ports"] == [{"name": "metrics", "containerPort": 9108, "protocol": "TCP"}]
    assert driver["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": "9108",
                                                 "prometheus.io/path": "/metrics"}
    assert "ports" not in spec["executor"]["template"]["spec"]["containers"][0]
    default = build_spark_application(_sync(), 4, generation=9, sync_uid=UID, settings=SETTINGS,
                                      spec_configmap=CONFIGMAP)["spec"]["driver"]["template"]
    assert default["spec"]["containers"][0]["ports"][0]["containerPort"] == 8090
    off = build_spark_application(_sync(metrics={"enabled": False}), 4, generation=9, sync_uid=UID, settings=SETTINGS,
                                  spec_configmap=CONFIGMAP)["spec"]["driver"]["template"]
    assert "ports" not in off["spec"]["containers"][0] and "metadata" not in off


def test_spec_image_and_service_account_override_the_settings() -> None:
    sync = _sync(spark={"image": "mine:1", "serviceAccount": "sync-runner"})
    spec = build_spark_application(sync, 1, generation=1, sync_uid=UID, settings=SETTINGS, spec_configmap=CONFIGMAP)["spec"]
    assert spec["image"] == "mine:1"
    assert spec["driver"]["serviceAccount"] == "sync-runner"
    assert spec["sparkConf"] == {**QUICK_JIT, **CLUSTER}


def test_jvms_skip_the_optimizing_compiler_unless_a_transform_runs_sql_in_them() -> None:
    """Without spec.transform the JVMs only schedule and move bytes: C1 only (docs/dataplane.md).
    A transform runs SQL in the JVM (no default then); a key the spec sets wins whole."""
    def conf(transform: str | None = None, **spark_conf: str) -> dict[str, str]:
        sync = _sync(spark={"conf": spark_conf}, **({"transform": transform} if transform else {}))
        rendered = build_spark_application(sync, 1, generation=1, sync_uid=UID, settings=SETTINGS,
                                           spec_configmap=CONFIGMAP)["spec"]["sparkConf"]
        return {key: value for key, value in rendered.items() if key not in CLUSTER}

    assert conf() == QUICK_JIT
    assert conf(transform="SELECT * FROM source") == {}
    assert conf(**{"spark.driver.extraJavaOptions": "-Xss4m"}) == {
        "spark.driver.extraJavaOptions": "-Xss4m", "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


def test_no_service_account_and_no_secrets_when_none_are_configured() -> None:
    sync = _sync(source={"generator": {"totalRows": 10}}, schema=[], table={"name": "db.trips"})
    spec = build_spark_application(sync, 1, generation=1, sync_uid=UID, settings=OperatorSettings(), spec_configmap=CONFIGMAP)["spec"]
    assert "serviceAccount" not in spec["driver"]
    assert "secrets" not in spec["driver"] and "secrets" not in spec["executor"]


def test_secret_names_are_unique_and_sorted() -> None:
    sync = _sync(table={"name": "db.trips", "catalog": {"secretRef": {"name": "kafka-creds"}}})
    assert secret_names(sync) == ["kafka-creds"]


def test_spec_configmap_holds_the_whole_document_verbatim_and_is_immutable() -> None:
    document = _document()
    configmap = build_spec_configmap(_sync(), document["spec"], 4, generation=9, sync_uid=UID)
    assert configmap["metadata"]["name"] == configmap_name("trips-v4", configmap["data"]["sync.yaml"])
    assert configmap["metadata"]["labels"]["icebergsync.io/sink-version"] == "4"
    assert configmap["metadata"]["labels"]["icebergsync.io/application"] == "trips-v4"
    assert configmap["metadata"]["ownerReferences"][0]["uid"] == UID
    assert configmap["immutable"] is True
    written = yaml.safe_load(configmap["data"]["sync.yaml"])
    assert written == {"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                       "metadata": {"name": "trips", "namespace": "data"}, "spec": document["spec"]}
    assert parse_spec(written) == _sync()


def test_spec_configmap_name_changes_with_the_spec_content() -> None:
    """A ConfigMap left from a failed launch of another spec never has the name this launch uses."""
    before = build_spec_configmap(_sync(), _document()["spec"], 4, generation=9, sync_uid=UID)
    again = build_spec_configmap(_sync(), _document()["spec"], 4, generation=9, sync_uid=UID)
    changed_spec = _document(commit={"interval": "2s"})["spec"]
    changed = build_spec_configmap(_sync(commit={"interval": "2s"}), changed_spec, 4, generation=10, sync_uid=UID)
    assert before["metadata"]["name"] == again["metadata"]["name"]
    assert changed["metadata"]["name"] != before["metadata"]["name"]
    for configmap in (before, changed):
        assert configmap["metadata"]["name"].startswith("trips-v4-spec-")
        assert len(configmap["metadata"]["name"]) <= 253


def test_run_arguments_round_trip_through_the_job_parser() -> None:
    for version in (1, 7, 123456):
        args = build_parser(extra_commands=(add_run_command,)).parse_args(run_arguments("/spec.yaml", version))
        assert (args.command, args.spec, args.sink_version, args.master) == ("run", "/spec.yaml", version, "")


def test_rendered_objects_carry_secret_names_never_values() -> None:
    rendered = json.dumps([build_spark_application(_sync(), 1, 1, UID, SETTINGS, CONFIGMAP),
                           build_spec_configmap(_sync(), _document()["spec"], 1, 1, UID)])
    assert "catalog-creds" in rendered
    for secret_word in ("password", "token", "access-key"):
        assert secret_word not in rendered


def _app(state: str, error: str = "", version: str = "3") -> dict[str, Any]:
    return {"metadata": {"name": "trips-v3", "labels": {"icebergsync.io/sink-version": version},
                         "annotations": {"icebergsync.io/generation": "2"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"applicationState": {"state": state, "errorMessage": error}}}


@pytest.mark.parametrize(("state", "error", "outcome"), [
    ("", "", Outcome.STARTING),
    ("SUBMITTED", "", Outcome.STARTING),
    ("PENDING_RERUN", "", Outcome.STARTING),
    ("RUNNING", "", Outcome.RUNNING),
    ("COMPLETED", "", Outcome.COMPLETED),
    ("FAILED", "driver container failed with ExitCode: 1, Reason: Error", Outcome.FAILED),
    ("SUBMISSION_FAILED", "failed to run spark-submit", Outcome.FAILED),
    ("FAILED", "driver container failed with ExitCode: 75, Reason: Error", Outcome.FENCED),
    ("FAILED", "driver container failed with ExitCode: 175, Reason: Error", Outcome.FAILED),
    ("FAILED", "driver container failed with ExitCode: 65, Reason: Error", Outcome.BAD_INPUT),
])
def test_application_outcomes(state: str, error: str, outcome: Outcome) -> None:
    app = parse_application(_app(state, error))
    assert app is not None
    assert app.outcome is outcome
    assert (app.name, app.version, app.generation) == ("trips-v3", 3, 2)


def test_applications_without_a_version_label_are_not_ours() -> None:
    assert parse_application(_app("RUNNING", version="x")) is None


def test_settings_from_environment_and_flags() -> None:
    settings, level = parse_settings(
        ["--backoff-cap", "2m", "--stall-after-failures", "3"],
        {"ICEBERGSYNC_NAMESPACES": "a, b", "ICEBERGSYNC_TIMER_INTERVAL": "5s", "ICEBERGSYNC_BACKOFF_BASE": "2",
         "ICEBERGSYNC_METRICS_PORT": "0", "ICEBERGSYNC_STANDALONE": "true", "ICEBERGSYNC_LOG_LEVEL": "debug"},
    )
    assert settings.namespaces == ("a", "b")
    assert not settings.clusterwide
    assert (settings.timer_interval, settings.backoff_base, settings.backoff_cap) == (5.0, 2.0, 120.0)
    assert settings.stall_after_failures == 3
    assert settings.metrics_port == 0
    assert settings.standalone is True
    assert level == "debug"


def test_default_settings_watch_all_namespaces() -> None:
    settings, _ = parse_settings([], {})
    assert settings == OperatorSettings()
    assert settings.clusterwide
    assert settings.metrics_address == "127.0.0.1"
    assert settings.liveness_endpoint == "http://127.0.0.1:8080/healthz"


def test_invalid_backoff_settings_are_refused() -> None:
    with pytest.raises(SystemExit):
        parse_settings(["--backoff-base", "10", "--backoff-cap", "5"], {})


def test_retry_delay_doubles_up_to_the_cap() -> None:
    settings = OperatorSettings(backoff_base=10, backoff_cap=60)
    assert [settings.retry_delay(n) for n in range(1, 7)] == [10, 20, 40, 60, 60, 60]
    assert settings.retry_delay(10_000) == 60


def test_older_replicas_outrank_newer_ones_unless_a_priority_is_set() -> None:
    settings = OperatorSettings()
    assert settings.peering_priority(started_at=1000.0) > settings.peering_priority(started_at=1000.5)
    assert OperatorSettings(priority=7).peering_priority(started_at=1.0) == 7


PLACEMENT = {
    "memoryOverhead": "512m",
    "nodeSelector": {"pool": "data"},
    "tolerations": [{"key": "dedicated", "value": "spark", "effect": "NoSchedule"},
                    {"key": "spot", "operator": "Exists"}],
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                          "labelSelector": {"matchLabels": {"team": "data"}}}}]}},
    "priorityClassName": "batch-low",
    "labels": {"team": "data"},
    "annotations": {"example.com/cost-center": "42"},
}


def test_placement_goes_into_the_pod_templates_which_spark_keeps() -> None:
    """Node selector, tolerations, affinity, PriorityClass, labels and annotations of each pod in its pod
    template (no Spark Operator webhook needed); memoryOverhead as Spark's own conf."""
    sync = _sync(spark={"driver": {"memory": "2g", **PLACEMENT},
                        "executor": {"memory": "4g", "instances": 2, "nodeSelector": {"pool": "spot"}}})
    spec = build_spark_application(sync, 4, generation=9, sync_uid=UID, settings=SETTINGS, spec_configmap=CONFIGMAP)["spec"]
    driver = spec["driver"]["template"]
    assert driver["metadata"]["labels"] == {"team": "data"}
    assert driver["metadata"]["annotations"]["example.com/cost-center"] == "42"
    assert driver["metadata"]["annotations"]["prometheus.io/port"] == "8090"  # the metrics port's, beside it
    assert driver["spec"]["nodeSelector"] == {"pool": "data"}
    assert driver["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists"}]
    assert driver["spec"]["affinity"] == PLACEMENT["affinity"]
    assert driver["spec"]["priorityClassName"] == "batch-low"
    assert spec["driver"]["labels"]["icebergsync.io/sink-version"] == "4"  # the operator's labels stay its own
    executor = spec["executor"]["template"]
    assert "metadata" not in executor
    assert executor["spec"]["nodeSelector"] == {"pool": "spot"}
    assert not {"tolerations", "affinity", "priorityClassName"} & set(executor["spec"])
    assert spec["sparkConf"]["spark.driver.memoryOverhead"] == "512m"
    assert "spark.executor.memoryOverhead" not in spec["sparkConf"]


@pytest.mark.parametrize(("toleration", "error"), [
    ({"operator": "Equal", "value": "x"}, "without a key needs operator Exists"),
    ({"key": "spot", "operator": "Exists", "value": "x"}, "Exists takes no value"),
    ({"key": "spot", "tolerationSeconds": 30, "effect": "NoSchedule"}, "tolerationSeconds needs effect NoExecute"),
])
def test_a_toleration_kubernetes_would_refuse_is_refused_in_the_spec(toleration: dict[str, Any], error: str) -> None:
    with pytest.raises(Exception, match=error):
        _sync(spark={"driver": {"tolerations": [toleration]}})


@pytest.mark.parametrize(("field", "value", "error"), [
    ("labels", {"bad key!": "x"}, "not a Kubernetes label or annotation key"),
    ("labels", {"team": "a value with spaces"}, "a label value is at most 63"),
    ("nodeSelector", {"pool": "x" * 64}, "a label value is at most 63"),
])
def test_pod_metadata_keys_and_label_values_are_checked(field: str, value: dict[str, str], error: str) -> None:
    with pytest.raises(Exception, match=error):
        _sync(spark={"executor": {field: value}})
