"""The attacker tier: the chart as rendered, attacked by tenants (docs/security.md, "Attacks and defences").

One operator per module runs with exactly the rendered Deployment's args and env under the chart's
default values, holding only the chart's RBAC through a token of its own ServiceAccount
(``tests/e2e/rendered_chart.py``). Tenants act by impersonation, each in a namespace of their own
with the chart's tenant ``admin`` role, as ``grant_tenant`` binds it (tests/e2e/conftest.py). Catalog servers standing in for a
tenant's hostile ones are ``tests/hostile_servers.py`` listeners on 127.0.0.1.

Rows covered here: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 and the rendered half of 17.
Covered elsewhere:

* 13a (S3 metadata read with the operator's own cloud credentials) needs an object store:
  tests/integration/test_operator_s3_metadata.py (MinIO).
* 17 (a pod joining a sync's Spark application) needs running pods: tests/cluster/ runs the attack;
  here, only that the rendered application carries the protecting conf and a spec cannot unset it.
* 8's memory under many hostile catalogs is not measured here (an open finding of issue 32).

Under the defaults the operator is cluster-wide and may read no Secret outside its own namespace, so
a catalog naming a tenant namespace's Secret gets no job at all (row 12), whoever may read it. Rows
1, 4 and 13 fail today for a tenant's IcebergCatalog, because the chart's allowedCatalogUris is empty:
strict xfails, an open finding of issue 32.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest
from kubernetes import client

from icebergsync import protocol
from icebergsync.catalog import open_catalog
from icebergsync.spec import Catalog
from tests.e2e.conftest import GROUP, VERSION, Kube, OperatorProcess, Tenant, wait_for
from tests.e2e.rendered_chart import apply_objects, chart_crds, chart_operator, delete_objects
from tests.e2e.test_catalog_resources import catalog_ready, create_catalog, create_secret, ref_spec
from tests.e2e.test_closed_defaults import ATTACK_CONF, stalled_message
from tests.e2e.test_helm import PERMISSION_PROBLEM
from tests.hostile_servers import Listener, drip, gzip_bomb, respond, silent_postgres
from tests.infra.kube import KubeCluster, apply_crd
from tests.unit.test_chart import FULLNAME, NAMESPACE, render

Tenants = Callable[[], Tenant]
Lake = dict[str, str]
TIMEOUT = 10  #: the chart's default catalogTimeout, seconds
MAX_BYTES = 32 * 1024**2  #: the chart's default catalogMaxBytes
TARPITS = 12  #: three times the chart's default maxStuckCatalogReads


@pytest.fixture(scope="module")
def operator(kube_cluster: KubeCluster, helm_binary: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The chart rendered with its defaults, applied, and its operator running under its own token."""
    work_dir = tmp_path_factory.mktemp("chart")
    docs = render(helm_binary, work_dir)
    for crd in chart_crds():
        apply_crd(kube_cluster, crd)
    with kube_cluster.api_client() as admin:
        try:
            client.CoreV1Api(admin).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        except client.ApiException as error:
            if error.status != 409:  # an earlier module's release namespace is fine
                raise
        cluster_scoped = apply_objects(admin, docs)
        process = chart_operator(kube_cluster, admin, docs, work_dir)
        try:
            yield process.start()
        finally:
            process.stop()
            delete_objects(admin, cluster_scoped)


@pytest.fixture
def tenant_role() -> str:
    """Tenants here hold the chart's ``admin`` tenant role: a namespace admin's, who may declare IcebergCatalogs
    (the issue's premise for the catalog attacks); the ``edit`` role's authors cannot."""
    return f"{FULLNAME}-admin"


def lake_catalog(tenant: Tenant, lake: Lake, name: str = "lake", **spec: Any) -> None:
    """An IcebergCatalog the namespace's admin declares (not the tenant): a local SQLite catalog."""
    create_catalog(tenant.admin, name, {"type": "sql", **lake, **spec})


def wait_ready(kube: Kube, name: str, reason: str) -> str:
    """Wait for the sync's Ready condition to have ``reason``; every condition's message."""
    status = kube.wait_status(name, f"Ready {reason}", lambda s: any(
        c["type"] == "Ready" and c["reason"] == reason for c in s.get("conditions", [])), timeout=3 * TIMEOUT + 30)
    return " | ".join(c["message"] for c in status["conditions"])


def wait_catalog(kube: Kube, name: str) -> tuple[str, str, str]:
    return wait_for(f"catalog {name} checked", lambda: catalog_ready(kube, name), timeout=3 * TIMEOUT + 30)


def wait_events(kube: Kube, name: str, reasons: list[str]) -> None:
    wait_for(f"{name}: events {reasons}", lambda: kube.event_reasons(name) == reasons)


def mounted_secrets(application: dict[str, Any]) -> set[str]:
    return {secret["name"] for pod in ("driver", "executor") for secret in application["spec"][pod].get("secrets", [])}


def service_account_token_secret(kube: Kube, account: str) -> str:
    """A ServiceAccount and a token Secret of it (created by the admin; the tenant may not read it)."""
    kube.core.create_namespaced_service_account(kube.namespace, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name=account)))
    name = f"{account}-token"
    kube.core.create_namespaced_secret(kube.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, annotations={"kubernetes.io/service-account.name": account}),
        type="kubernetes.io/service-account-token"))
    return name


# --- rows 10, 11, 14, 16, 17: what a spec asks the pods for ---------------------------------------


def test_what_a_spec_asks_the_pods_for_is_refused(operator: OperatorProcess, tenants: Tenants, warehouse: Lake) -> None:
    tenant = tenants()
    lake_catalog(tenant, warehouse)
    catalog = open_catalog(Catalog(uri=warehouse["uri"], warehouse=warehouse["warehouse"]))
    catalog.create_namespace("db")
    rows = pa.table({"id": pa.array([1], pa.int64())})
    foreign = protocol.Writer("team-b/trips", 3, "attempt")
    catalog.create_table("db.taken", rows.schema).append(
        rows, snapshot_properties=protocol.snapshot_properties(foreign, protocol.KIND_DATA, {"next_id": 1}))
    cases: dict[str, tuple[dict[str, Any], str, list[str]]] = {
        "image": ({"spark": {"image": "docker.io/attacker/miner:latest"}}, "PolicyViolation",
                  ["spec.spark.image: 'docker.io/attacker/miner:latest' is not allowed"]),
        "account": ({"spark": {"serviceAccount": "cluster-admin"}}, "PolicyViolation",
                    ["spec.spark.serviceAccount: 'cluster-admin' is not allowed"]),
        "conf": ({"spark": {"conf": ATTACK_CONF}}, "PolicyViolation",
                 [f"spec.spark.conf: {key!r} is not among the allowed keys" for key in ATTACK_CONF]),
        "size": ({"spark": {"executor": {"instances": 50}}}, "PolicyViolation",
                 ["spec.spark.executor.instances: 50 is above the cap of 8 executors per sync"]),
        "unauthenticated": ({"spark": {"conf": {"spark.authenticate": "false", "spark.ui.killEnabled": "true"}}},
                            "PolicyViolation", ["'spark.authenticate'", "'spark.ui.killEnabled'"]),
        "transform": ({"transform": "SELECT java_method('java.lang.System', 'getenv', 'HOME') AS notes, * FROM source"},
                      "PolicyViolation", ["spec.transform: SQL transforms are not allowed"]),
        "foreign-sink": ({"sinkId": "team-b/trips"}, "InvalidSpec",
                         [f"spec.sinkId: 'team-b/trips' is not a sink of namespace {tenant.namespace}"]),
    }
    for name, (overrides, _, _) in cases.items():
        tenant.kube.create_sync(name, {**ref_spec("lake"), **overrides})
    taken = ref_spec("lake")
    tenant.kube.create_sync("taken", {**taken, "table": {**taken["table"], "name": "db.taken"}})

    for name, (_, reason, texts) in cases.items():
        message = stalled_message(tenant.kube, name, reason)
        for text in texts:
            assert text in message, (name, message)
        wait_events(tenant.admin, name, [reason])
    message = stalled_message(tenant.kube, "taken", "TableInUse")
    assert f"table db.taken is written by sink team-b/trips, not {tenant.namespace}/taken" in message
    assert tenant.admin.applications() == {}
    assert len(catalog.load_table("db.taken").metadata.snapshots) == 1


# --- rows 15 and 17 (rendered): the application the operator renders ---------------------------------


def test_the_rendered_application_is_hardened(operator: OperatorProcess, tenants: Tenants, warehouse: Lake) -> None:
    tenant = tenants()
    lake_catalog(tenant, warehouse)
    tenant.kube.create_sync("trips", ref_spec("lake"))

    rendered = tenant.admin.wait_applications({"trips-v1"})["trips-v1"]
    assert mounted_secrets(rendered) == set()
    application = rendered["spec"]
    assert application["image"] == operator.env["ICEBERGSYNC_DEFAULT_IMAGE"]  # the chart's image, nobody else's
    assert "serviceAccount" not in application["driver"]  # the chart creates no job account by default
    assert {key: application["sparkConf"][key] for key in ("spark.authenticate", "spark.network.crypto.enabled",
                                                           "spark.ui.killEnabled")} == {
        "spark.authenticate": "true", "spark.network.crypto.enabled": "true", "spark.ui.killEnabled": "false"}
    for pod, token in (("driver", True), ("executor", False)):
        template = application[pod]["template"]["spec"]
        assert template["automountServiceAccountToken"] is token, pod
        assert template["securityContext"]["runAsNonRoot"] is True, pod
        [container] = template["containers"]
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                                "readOnlyRootFilesystem": True}, pod
        assert not any("hostPath" in volume for volume in template["volumes"]), pod


# --- row 12: Secrets --------------------------------------------------------------------------------


def test_no_secret_of_a_tenant_namespace_is_read_or_mounted(operator: OperatorProcess, tenants: Tenants,
                                                           warehouse: Lake) -> None:
    """A cluster-wide operator of the chart's defaults may read no Secret outside its own namespace: a
    catalog naming the namespace admin's gets no job; one naming a token Secret the tenant may not read is
    refused at admission (the chart's ValidatingAdmissionPolicy), naming the field."""
    tenant = tenants()
    token_secret = service_account_token_secret(tenant.admin, "builder")
    create_secret(tenant.kube, "lake-creds", {"echo": "false"})
    lake_catalog(tenant, warehouse, secretRef={"name": "lake-creds"})
    with pytest.raises(client.ApiException) as borrowing:
        create_catalog(tenant.kube, "borrowed", {"type": "sql", **warehouse, "secretRef": {"name": token_secret}})
    assert borrowing.value.status == 403
    assert f"spec.secretRef: {tenant.user} may not get Secret {token_secret}" in str(borrowing.value.body)
    tenant.kube.create_sync("trips", ref_spec("lake"))

    refused = f"cannot read Secret 'lake-creds' of the catalog in namespace {tenant.namespace}: 403 Forbidden"
    stalled = stalled_message(tenant.kube, "trips", "SecretRefused")  # its type cannot be checked: nothing mounts
    assert "'lake-creds'" in stalled and "403" in stalled and "rbac.secrets" in stalled
    assert wait_catalog(tenant.admin, "lake")[2] == refused
    assert tenant.admin.applications() == {}


# --- rows 1, 12, 13: an inline catalog, and another namespace's catalog ----------------------------


def test_an_inline_catalog_is_refused_and_never_contacted(operator: OperatorProcess, tenants: Tenants,
                                                          tmp_path: Path) -> None:
    tenant = tenants()
    token_secret = service_account_token_secret(tenant.admin, "builder")
    created = tmp_path / "created.db"
    with Listener() as probe:
        borrowing = {"type": "rest", "uri": probe.url, "secretRef": {"name": token_secret}}
        with pytest.raises(client.ApiException) as refused:  # the chart's admission policy: not the author's to read
            tenant.kube.create_sync("token", {**ref_spec("unused"), "table": {"name": "db.trips", "catalog": borrowing}})
        assert refused.value.status == 403 and "spec.table.catalog.secretRef" in str(refused.value.body)
        catalogs = {
            "proxy": {"type": "rest", "uri": f"{probe.url}/internal"},
            "local-file": {"type": "sql", "uri": f"sqlite:///{created}", "warehouse": str(tmp_path)},
        }
        for name, inline in catalogs.items():
            tenant.kube.create_sync(name, {**ref_spec("unused"), "table": {"name": "db.trips", "catalog": inline}})
        for name in catalogs:
            assert "spec.table.catalogRef" in stalled_message(tenant.kube, name, "InlineCatalogRefused")
            wait_events(tenant.admin, name, ["InlineCatalogRefused"])
        assert probe.connections == 0
    assert not created.exists()
    assert tenant.admin.applications() == {}


def test_a_cluster_catalog_serves_its_namespaces_and_its_own_secret_stays_with_the_operator(
        operator: OperatorProcess, tenants: Tenants, warehouse: Lake) -> None:
    served, other = tenants(), tenants()
    name = f"lake-{uuid.uuid4().hex[:8]}"
    create_secret(Kube(served.admin.api_client, NAMESPACE), f"{name}-admin", {"echo": "false"})
    custom = served.admin.custom
    custom.create_cluster_custom_object(GROUP, VERSION, "clustericebergcatalogs", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterIcebergCatalog", "metadata": {"name": name},
        "spec": {"type": "sql", **warehouse, "namespaces": [served.namespace],
                 "secretRef": {"name": f"{name}-admin"}}})
    try:
        served.kube.create_sync("served", ref_spec(name, "ClusterIcebergCatalog"))
        other.kube.create_sync("foreign", ref_spec(name, "ClusterIcebergCatalog"))
        assert f"does not serve namespace {other.namespace}" in stalled_message(other.kube, "foreign",
                                                                               "CatalogNotServed")
        application = served.admin.wait_applications({"served-v1"})["served-v1"]
        assert mounted_secrets(application) == set()
        assert wait_for("the cluster catalog connected", lambda: (lambda found: found if found[1] == "Connected"
                                                                  else None)(ready_of_cluster_catalog(custom, name)))
        assert other.admin.applications() == {}
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "clustericebergcatalogs", name)


def ready_of_cluster_catalog(custom: client.CustomObjectsApi, name: str) -> tuple[str, str, str]:
    body = cast(dict[str, Any], custom.get_cluster_custom_object(GROUP, VERSION, "clustericebergcatalogs", name))
    [ready] = [c for c in (body.get("status") or {}).get("conditions", []) if c["type"] == "Ready"]
    return ready["status"], ready["reason"], ready["message"]


# --- rows 2-7: a tenant's hostile catalog ------------------------------------------------------------


def test_each_hostile_catalog_ends_with_its_condition_and_no_connection_elsewhere(
        operator: OperatorProcess, tenants: Tenants) -> None:
    tenant = tenants()
    bomb = respond("200 OK", {"Content-Type": "application/json", "Content-Encoding": "gzip"},
                   gzip_bomb(2 * MAX_BYTES))
    with Listener() as attacker, Listener() as elsewhere, Listener() as tarpit, Listener(drip) as dripping, \
            Listener(bomb) as bombing, Listener(silent_postgres) as postgres, \
            Listener(respond("302 Found", {"Location": f"{elsewhere.url}/v1/config"})) as redirecting:
        pg = f"postgresql://sync:pw@127.0.0.1:{postgres.port}/catalog"
        cases = {  # name: (catalog, the catalog's Ready reason, the sync's Ready reason, text of both)
            "backslash": ({"type": "rest", "uri": f"http://127.0.0.1:{attacker.port}\\@catalog.internal/"},
                          "PolicyViolation", "PolicyViolation", "contains a backslash"),
            "userinfo": ({"type": "rest", "uri": f"http://127.0.0.1:{attacker.port}@catalog.internal/"},
                         "PolicyViolation", "PolicyViolation", "has user information"),
            "redirect": ({"type": "rest", "uri": redirecting.url}, "Unreachable", "WaitingForCatalog",
                         f"catalog at {redirecting.url} answered with a redirect (HTTP 302)"),
            "pg-options": ({"type": "sql", "uri": f"{pg}?host=127.0.0.1&port={elsewhere.port}"},
                           "PolicyViolation", "PolicyViolation", "host"),
            "tarpit": ({"type": "rest", "uri": tarpit.url}, "TimedOut", "WaitingForCatalog",
                       f"catalog at {tarpit.url} did not answer within {TIMEOUT}s"),
            "slow-drip": ({"type": "rest", "uri": dripping.url}, "TimedOut", "WaitingForCatalog",
                          f"catalog at {dripping.url} did not answer within {TIMEOUT}s"),
            "silent-postgres": ({"type": "sql", "uri": pg}, "TimedOut", "WaitingForCatalog",
                                f"catalog at postgresql://127.0.0.1:{postgres.port}/catalog did not answer within "
                                f"{TIMEOUT}s"),
            "gzip-bomb": ({"type": "rest", "uri": bombing.url}, "Unreachable", "WaitingForCatalog",
                          f"catalog at {bombing.url} sent a response larger than {MAX_BYTES} bytes"),
        }
        for name, (catalog, _, _, _) in cases.items():
            create_catalog(tenant.kube, name, catalog)
            tenant.kube.create_sync(name, ref_spec(name))

        for name, (_, catalog_reason, sync_reason, text) in cases.items():
            checked = wait_catalog(tenant.admin, name)
            assert checked[1] == catalog_reason and text in checked[2], (name, checked)
            assert text in wait_ready(tenant.kube, name, sync_reason), name
        assert (attacker.connections, elsewhere.connections) == (0, 0)
        assert min(tarpit.connections, dripping.connections, postgres.connections) >= 1
        assert tenant.admin.applications() == {}
        assert operator.liveness() == 200


# --- rows 8 and 9: one tenant's tarpits, another tenant's status ------------------------------------


def test_a_tenants_tarpits_leave_another_tenants_catalog_and_sync_served(
        operator: OperatorProcess, tenants: Tenants, warehouse: Lake) -> None:
    stalling, steady = tenants(), tenants()
    with Listener() as tarpit:
        for index in range(TARPITS):
            create_catalog(stalling.kube, f"tarpit-{index}", {"type": "rest", "uri": tarpit.url})
            stalling.kube.create_sync(f"tarpit-{index}", ref_spec(f"tarpit-{index}"))
        wait_for("the tarpit to hold reads", lambda: tarpit.connections >= 4)
        lake_catalog(steady, warehouse)
        steady.kube.create_sync("trips", ref_spec("lake"))
        # Served while every tarpit read still hangs: well within one catalog timeout.
        assert wait_for("the steady catalog connected", lambda: catalog_ready(steady.admin, "lake"),
                        timeout=TIMEOUT / 2)[:2] == ("True", "Connected")
        steady.admin.wait_applications({"trips-v1"}, timeout=TIMEOUT / 2)
        assert operator.liveness() == 200
        for index in range(TARPITS):
            assert wait_catalog(stalling.admin, f"tarpit-{index}")[1] == "TimedOut"
        assert operator.liveness() == 200
    assert 'icebergsync_operator_reconciles_total{result="error"}' not in operator.metrics()


# --- rows 1, 4 and 13 under the chart's empty allowedCatalogUris: open findings of issue 32 ------------

EMPTY_ALLOW_LIST = ("issue 32 open finding: the chart's default allowedCatalogUris is empty (any endpoint), so a "
                    "tenant's IcebergCatalog points the operator anywhere")


def config_moving_the_uri(to: str) -> bytes:
    """A REST catalog's /v1/config answer that moves the catalog's uri (and adds what the filter drops)."""
    return json.dumps({"defaults": {}, "overrides": {"uri": to, "py-io-impl": "attacker.FileIO"}}).encode()


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"{EMPTY_ALLOW_LIST}: SSRF")
def test_a_tenants_catalog_at_an_internal_address_gets_no_request(operator: OperatorProcess,
                                                                 tenants: Tenants) -> None:
    tenant = tenants()
    not_found = respond("404 Not Found", {})
    with Listener(not_found) as internal, Listener(not_found) as moved_to, Listener(respond(
            "200 OK", {"Content-Type": "application/json"}, config_moving_the_uri(moved_to.url))) as moving:
        create_catalog(tenant.kube, "internal", {"type": "rest", "uri": f"{internal.url}/internal"})
        create_catalog(tenant.kube, "moving", {"type": "rest", "uri": moving.url})
        tenant.kube.create_sync("moving", ref_spec("moving"))
        wait_catalog(tenant.admin, "internal")
        wait_for("the sync's first table read", lambda: tenant.kube.condition("moving", "Ready"))
        assert (internal.connections, moved_to.connections) == (0, 0)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"{EMPTY_ALLOW_LIST}: a SQLite catalog creates a "
                   "file in the operator's filesystem")
def test_a_tenants_sqlite_catalog_creates_no_file(operator: OperatorProcess, tenants: Tenants,
                                                  tmp_path: Path) -> None:
    tenant = tenants()
    created = tmp_path / "created.db"
    create_catalog(tenant.kube, "local", {"type": "sql", "uri": f"sqlite:///{created}", "warehouse": str(tmp_path)})
    wait_catalog(tenant.admin, "local")
    assert not created.exists()


# --- the chart's RBAC: enough for everything above, and nothing was refused but tenants' Secrets --------


def test_the_operator_was_refused_nothing_but_tenants_secrets(operator: OperatorProcess) -> None:
    """Runs last: the module's operator log holds no permission problem besides reading a tenant's Secret."""
    problems = [line for line in operator.log().splitlines()
                if PERMISSION_PROBLEM.search(line) and "cannot read Secret" not in line
                and "to check its type" not in line]
    assert problems == []
