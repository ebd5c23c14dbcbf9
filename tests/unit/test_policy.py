"""The operator's policy on images, service accounts, Spark conf keys and catalog endpoints (pure)."""

from __future__ import annotations

from typing import Any

from icebergsync_operator.policy import policy_problems
from icebergsync_operator.settings import DEFAULT_DENIED_SPARK_CONF, OperatorSettings, parse_settings

from icebergsync.spec import IcebergSync, parse_spec


def sync_with(spark: dict[str, Any], catalog_uri: str = "http://catalog.data:8181") -> IcebergSync:
    return parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                       "metadata": {"name": "trips", "namespace": "team-a"},
                       "spec": {"source": {"generator": {}}, "spark": spark,
                                "table": {"name": "db.trips", "catalog": {"type": "rest", "uri": catalog_uri}}}})


STRICT = OperatorSettings(allowed_images=("registry.example/data/",), allowed_service_accounts=("icebergsync-spark",))


def test_allowed_spec_has_no_problems() -> None:
    spec = sync_with({"image": "registry.example/data/icebergsync:1", "serviceAccount": "icebergsync-spark",
                      "conf": {"spark.sql.shuffle.partitions": "8", "spark.executor.memoryOverhead": "512m"}})
    assert policy_problems(spec, STRICT) == ()
    assert policy_problems(sync_with({}), STRICT) == ()  # the operator's own defaults are always allowed


def test_an_image_and_service_account_outside_the_allow_lists_are_refused() -> None:
    spec = sync_with({"image": "docker.io/attacker/miner:latest", "serviceAccount": "cluster-admin"})
    assert policy_problems(spec, STRICT) == (
        "spec.spark.image: 'docker.io/attacker/miner:latest' is not allowed (allowed image prefixes: "
        "registry.example/data/)",
        "spec.spark.serviceAccount: 'cluster-admin' is not allowed (allowed: icebergsync-spark)",
    )
    assert policy_problems(spec, OperatorSettings()) == ()  # empty allow-lists allow any


def test_dangerous_spark_conf_is_denied_by_default() -> None:
    dangerous = {
        "spark.kubernetes.driver.volumes.hostPath.root.mount.path": "/host",
        "spark.kubernetes.executor.volumes.hostPath.root.options.path": "/",
        "spark.kubernetes.driver.podTemplateFile": "/tmp/t.yaml",
        "spark.kubernetes.authenticate.driver.serviceAccountName": "cluster-admin",
        "spark.kubernetes.container.image": "evil:1",
        "spark.kubernetes.executor.container.image": "evil:1",
        "spark.kubernetes.namespace": "kube-system",
        "spark.kubernetes.driver.secrets.admin-token": "/var/run/x",
        "spark.kubernetes.driver.secretKeyRef.TOKEN": "admin-token:token",
    }
    problems = policy_problems(sync_with({"conf": {**dangerous, "spark.sql.shuffle.partitions": "4"}}),
                               OperatorSettings())
    assert problems == tuple(f"spec.spark.conf: {key!r} is denied by the operator's policy" for key in sorted(dangerous))


def test_an_allow_list_of_conf_keys_refuses_everything_else() -> None:
    settings = OperatorSettings(allowed_spark_conf=("spark.sql.*",))
    spec = sync_with({"conf": {"spark.sql.shuffle.partitions": "4", "spark.driver.extraJavaOptions": "-Dx=1"}})
    assert policy_problems(spec, settings) == (
        "spec.spark.conf: 'spark.driver.extraJavaOptions' is not among the allowed keys (spark.sql.*)",)


def test_a_catalog_endpoint_outside_the_allowed_uris_is_refused() -> None:
    settings = OperatorSettings(allowed_catalog_uris=("https://catalog.internal/",))
    assert policy_problems(sync_with({}, "https://catalog.internal/v1"), settings) == ()
    assert policy_problems(sync_with({}, "http://169.254.169.254/"), settings) == (
        "spec.table.catalog.uri: http://169.254.169.254/ is not among the endpoints this operator may connect to "
        "(--allowed-catalog-uris: https://catalog.internal/)",)


def test_policy_settings_from_flags_and_environment() -> None:
    settings, _ = parse_settings(["--allowed-images", "a/,b/"], {
        "ICEBERGSYNC_ALLOWED_SERVICE_ACCOUNTS": "spark", "ICEBERGSYNC_DENIED_SPARK_CONF": "",
        "ICEBERGSYNC_ALLOWED_SPARK_CONF": "spark.sql.*"})
    assert settings.allowed_images == ("a/", "b/")
    assert settings.allowed_service_accounts == ("spark",)
    assert settings.denied_spark_conf == ()
    assert settings.allowed_spark_conf == ("spark.sql.*",)
    assert parse_settings([], {})[0].denied_spark_conf == DEFAULT_DENIED_SPARK_CONF


def test_an_ambiguous_catalog_uri_is_refused_even_when_every_endpoint_is_allowed() -> None:
    uri = "http://127.0.0.1:8181\\@catalog.internal/"
    for settings in (OperatorSettings(), OperatorSettings(allowed_catalog_uris=("http://catalog.internal/",))):
        assert policy_problems(sync_with({}, uri), settings) == (f"spec.table.catalog.uri: {uri!r} contains a backslash",)


def test_catalog_endpoints_are_matched_on_host_port_and_path_segments_not_string_prefixes() -> None:
    settings = OperatorSettings(allowed_catalog_uris=("https://catalog.internal/api",))
    assert policy_problems(sync_with({}, "HTTPS://Catalog.Internal:443/api/v1"), settings) == ()
    for uri in ("https://catalog.internal/apiv2", "https://catalog.internal.evil/api", "https://catalog.internal:8443/api"):
        [problem] = policy_problems(sync_with({}, uri), settings)
        assert problem.startswith(f"spec.table.catalog.uri: {uri} is not among the endpoints")
