"""The attacker tier: the chart as rendered, attacked by tenants (docs/security.md, "Attacks and defences").

One operator per module runs with exactly the rendered Deployment's args and env under the chart's
default values, holding only the chart's RBAC through a token of its own ServiceAccount
(``tests/e2e/rendered_chart.py``). Tenants act by impersonation, each in a namespace of their own
with the chart's tenant ``admin`` role, as ``grant_tenant`` binds it (tests/e2e/conftest.py). Catalog servers standing in for a
tenant's hostile ones are ``tests/hostile_servers.py`` listeners on 127.0.0.1.

The chart's defaults: ``operator.allowedCatalogUris`` is empty, so the operator contacts no tenant's
catalog (an IcebergCatalog or an inline one) at all: the catalog is ``Ready=False`` and each sync on it
``Stalled``, reason ``CatalogNotAllowed``, with one event; and it opens no local file for any catalog
(no ``--allow-local-catalogs``). What needs a sync to launch therefore runs on the one kind of catalog
the chart's operator reads: a ClusterIcebergCatalog the cluster admin declares, here a real Iceberg REST
catalog with its warehouse on MinIO (S3), started once for the module (``lake``), its S3 keys in a
Secret of the operator's namespace (its ``secretRef``, for the operator's connection check only).

Rows covered here, and how:

* 1 and 13: an inline catalog is refused (``InlineCatalogRefused``) and never contacted; a tenant's
  IcebergCatalog at an internal address, or whose ``/v1/config`` would move its uri, gets
  ``CatalogNotAllowed`` and no request; a SQLite one creates no file.
* 2-7: each hostile catalog of a tenant (parser confusions, redirect, PostgreSQL options, tarpit, slow
  drip, silent PostgreSQL, gzip bomb) ends refused before any connection: the parser confusions and
  PostgreSQL options with ``PolicyViolation`` (decided first), the rest with ``CatalogNotAllowed``; no
  listener sees a connection. What each defence does once an admin lists such an endpoint (timeouts,
  redirects refused, size caps, one event each) is covered by tests/e2e/test_hostile_catalogs.py
  (operators run with an allow-list), the list itself by tests/e2e/test_catalog_allow_list.py, and a
  ``/v1/config`` moving the uri by tests/unit/test_catalog_access.py; not by this tier.
* 8 and 9: twelve tarpit catalogs of one tenant are refused at once and never contacted, while another
  tenant's sync on the cluster catalog launches within half a catalog timeout, ``/healthz`` 200.
* 10, 11, 14, 16 and the rendered half of 17: policy refusals, a foreign ``sinkId`` and a table another
  sink writes (``TableInUse``), on the cluster catalog; 15: the rendered application's hardening.
* 12: no Secret of a tenant namespace is read or mounted (see the test's docstring); a ClusterIcebergCatalog
  serves its namespaces only and its own Secret never reaches a job.

Covered elsewhere:

* 13a (S3 metadata read with the operator's own cloud credentials) needs a SQL catalog on S3:
  tests/integration/test_operator_s3_metadata.py (MinIO).
* 17 (a pod joining a sync's Spark application) needs running pods: tests/cluster/ runs the attack;
  here, only that the rendered application carries the protecting conf and a spec cannot unset it.
* 8's memory under many hostile catalogs is not measured here (an open finding).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest
from kubernetes import client

from icebergsync import protocol
from tests.e2e.conftest import GROUP, OPERATOR_MAX_SECONDS, VERSION, Kube, OperatorProcess, Tenant, wait_for
from tests.e2e.rendered_chart import apply_objects, chart_crds, chart_operator, delete_objects
from tests.e2e.test_catalog_resources import catalog_ready, create_catalog, create_secret, ref_spec
from tests.e2e.test_closed_defaults import ATTACK_CONF, stalled_message
from tests.e2e.test_helm import PERMISSION_PROBLEM
from tests.hostile_servers import Listener, drip, gzip_bomb, respond, silent_postgres
from tests.infra.kube import KubeCluster, apply_crd
from tests.infra.services import RestCatalog, S3Server, start_minio, start_rest_catalog
from tests.unit.test_chart import FULLNAME, NAMESPACE, render

Tenants = Callable[[], Tenant]
TIMEOUT = 10  #: the chart's default catalogTimeout, seconds
MAX_BYTES = 32 * 1024**2  #: the chart's default catalogMaxBytes
TARPITS = 12  #: three times the chart's default maxStuckCatalogReads
NOT_ALLOWED = "CatalogNotAllowed"
EMPTY_LIST = "while operator.allowedCatalogUris is empty"
CLUSTER = "ClusterIcebergCatalog"


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
    (the premise of the catalog attacks); the ``edit`` role's authors cannot."""
    return f"{FULLNAME}-admin"


@dataclass(frozen=True)
class Lake:
    """The module's Iceberg REST catalog and the MinIO its warehouse is on."""

    rest: RestCatalog
    s3: S3Server


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """A real Iceberg REST catalog with an S3 (MinIO) warehouse, for the module; both live at most as long as
    an operator may, and are stopped after."""
    work_dir = tmp_path_factory.mktemp("lake")
    s3 = start_minio(work_dir / "minio", ttl=OPERATOR_MAX_SECONDS)
    try:
        rest = start_rest_catalog(work_dir / "rest", s3, ttl=OPERATOR_MAX_SECONDS)
        try:
            yield Lake(rest, s3)
        finally:
            rest._server.stop()
    finally:
        s3._server.stop()


DeclareCatalog = Callable[..., str]


@pytest.fixture
def cluster_catalog(kube_cluster: KubeCluster, lake: Lake) -> Iterator[DeclareCatalog]:
    """The cluster admin declares ClusterIcebergCatalogs on the module's lake, serving the namespaces given:
    its S3 keys in a Secret of the operator's namespace (``secretRef``: the operator's connection check only),
    endpoint and region as properties. Each is deleted, with its Secret, after the test."""
    created: list[str] = []
    with kube_cluster.api_client() as admin:
        release = Kube(admin, NAMESPACE)

        def declare(namespaces: list[str], **spec: Any) -> str:
            name = f"lake-{uuid.uuid4().hex[:8]}"
            create_secret(release, name, {"s3.access-key-id": lake.s3.access_key,
                                          "s3.secret-access-key": lake.s3.secret_key})
            created.append(name)
            release.custom.create_cluster_custom_object(GROUP, VERSION, "clustericebergcatalogs", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": CLUSTER, "metadata": {"name": name},
                "spec": {"type": "rest", "uri": lake.rest.uri, "warehouse": lake.rest.warehouse,
                         "properties": {"s3.endpoint": lake.s3.endpoint, "s3.region": lake.s3.region,
                                        "s3.path-style-access": "true"},
                         "namespaces": namespaces, "secretRef": {"name": name}, **spec}})
            return name

        yield declare
        for name in created:
            release.custom.delete_cluster_custom_object(GROUP, VERSION, "clustericebergcatalogs", name)
            release.core.delete_namespaced_secret(name, NAMESPACE)


def on(catalog: str, table: str = "db.trips", **spec: Any) -> dict[str, Any]:
    """A sync spec writing ``table`` through the ClusterIcebergCatalog ``catalog``."""
    base = ref_spec(catalog, CLUSTER)
    return {**base, "table": {**base["table"], "name": table}, **spec}


def fresh_table() -> str:
    """A table name no other test of the module uses (they share the lake)."""
    return f"t{uuid.uuid4().hex[:8]}.trips"


def wait_catalog(kube: Kube, name: str) -> tuple[str, str, str]:
    return wait_for(f"catalog {name} checked", lambda: catalog_ready(kube, name), timeout=3 * TIMEOUT + 30)


def not_allowed(kube: Kube, name: str, timeout: float = 3 * TIMEOUT + 30) -> str:
    """The message of an IcebergCatalog's Ready condition once it is ``CatalogNotAllowed`` (False)."""
    ready = wait_for(f"catalog {name} {NOT_ALLOWED}", lambda: (lambda r: r if r and r[1] == NOT_ALLOWED else None)(
        catalog_ready(kube, name)), timeout=timeout)
    assert ready[0] == "False", ready
    return ready[2]


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


def test_what_a_spec_asks_the_pods_for_is_refused(operator: OperatorProcess, tenants: Tenants, lake: Lake,
                                                   cluster_catalog: DeclareCatalog) -> None:
    tenant = tenants()
    catalog_name = cluster_catalog([tenant.namespace])
    catalog = lake.rest.load()
    taken = fresh_table()
    catalog.create_namespace(taken.split(".")[0])
    rows = pa.table({"id": pa.array([1], pa.int64())})
    foreign = protocol.Writer("team-b/trips", 3, "attempt")
    catalog.create_table(taken, rows.schema).append(
        rows, snapshot_properties=protocol.CommitStatement(foreign, protocol.KIND_DATA, {"next_id": 1}).properties())
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
        tenant.kube.create_sync(name, on(catalog_name, fresh_table(), **overrides))
    tenant.kube.create_sync("taken", on(catalog_name, taken))

    for name, (_, reason, texts) in cases.items():
        message = stalled_message(tenant.kube, name, reason)
        for text in texts:
            assert text in message, (name, message)
        wait_events(tenant.admin, name, [reason])
    message = stalled_message(tenant.kube, "taken", "TableInUse")
    assert f"table {taken} is written by sink team-b/trips, not {tenant.namespace}/taken" in message
    assert tenant.admin.applications() == {}
    assert len(catalog.load_table(taken).metadata.snapshots) == 1


# --- rows 15 and 17 (rendered): the application the operator renders ---------------------------------


def test_the_rendered_application_is_hardened(operator: OperatorProcess, tenants: Tenants,
                                              cluster_catalog: DeclareCatalog) -> None:
    tenant = tenants()
    tenant.kube.create_sync("trips", on(cluster_catalog([tenant.namespace]), fresh_table()))

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
                                                           lake: Lake, cluster_catalog: DeclareCatalog) -> None:
    """A cluster-wide operator of the chart's defaults may read no Secret outside its own namespace. A tenant's
    IcebergCatalog naming one is never contacted, so its Secret is never read (``CatalogNotAllowed`` comes
    first); a ClusterIcebergCatalog whose ``jobSecretRef`` names one gets its syncs no job (``SecretRefused``:
    its type cannot be checked); an IcebergCatalog naming a token Secret the tenant may not read is refused
    at admission (the chart's ValidatingAdmissionPolicy), naming the field."""
    tenant = tenants()
    token_secret = service_account_token_secret(tenant.admin, "builder")
    create_secret(tenant.kube, "lake-creds", {"s3.access-key-id": lake.s3.access_key,
                                              "s3.secret-access-key": lake.s3.secret_key})
    with Listener() as probe:
        # declared by the namespace's admin (not the tenant, who may not read the Secret)
        create_catalog(tenant.admin, "lake", {"type": "rest", "uri": probe.url, "secretRef": {"name": "lake-creds"}})
        with pytest.raises(client.ApiException) as borrowing:
            create_catalog(tenant.kube, "borrowed", {"type": "rest", "uri": probe.url,
                                                     "secretRef": {"name": token_secret}})
        assert borrowing.value.status == 403
        assert f"spec.secretRef: {tenant.user} may not get Secret {token_secret}" in str(borrowing.value.body)
        tenant.kube.create_sync("own", ref_spec("lake"))
        served = cluster_catalog([tenant.namespace], jobSecretRef={"name": "lake-creds"})
        tenant.kube.create_sync("trips", on(served, fresh_table()))

        assert EMPTY_LIST in not_allowed(tenant.admin, "lake")
        assert EMPTY_LIST in stalled_message(tenant.kube, "own", NOT_ALLOWED)
        stalled = stalled_message(tenant.kube, "trips", "SecretRefused")  # its type cannot be checked: nothing mounts
        assert "'lake-creds'" in stalled and "403" in stalled and "rbac.secrets" in stalled
        wait_events(tenant.admin, "own", [NOT_ALLOWED])
        wait_events(tenant.admin, "trips", ["SecretRefused"])
        assert probe.connections == 0
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
        operator: OperatorProcess, tenants: Tenants, cluster_catalog: DeclareCatalog) -> None:
    served, other = tenants(), tenants()
    name = cluster_catalog([served.namespace])  # its secretRef: a Secret of the operator's namespace
    served.kube.create_sync("served", on(name, fresh_table()))
    other.kube.create_sync("foreign", on(name, fresh_table()))
    assert f"does not serve namespace {other.namespace}" in stalled_message(other.kube, "foreign", "CatalogNotServed")
    application = served.admin.wait_applications({"served-v1"})["served-v1"]
    assert mounted_secrets(application) == set()
    assert wait_for("the cluster catalog connected", lambda: (lambda found: found if found[1] == "Connected"
                                                              else None)(ready_of_cluster_catalog(served.admin.custom,
                                                                                                  name)))
    assert other.admin.applications() == {}


def ready_of_cluster_catalog(custom: client.CustomObjectsApi, name: str) -> tuple[str, str, str]:
    body = cast(dict[str, Any], custom.get_cluster_custom_object(GROUP, VERSION, "clustericebergcatalogs", name))
    [ready] = [c for c in (body.get("status") or {}).get("conditions", []) if c["type"] == "Ready"]
    return ready["status"], ready["reason"], ready["message"]


# --- rows 2-7: a tenant's hostile catalog ------------------------------------------------------------


def test_each_hostile_catalog_is_refused_before_any_connection(operator: OperatorProcess, tenants: Tenants) -> None:
    """Under the chart's empty allow-list no tenant catalog is contacted: each ends with its condition and one
    event on its sync, and no listener sees a connection (the defences behind the list: test_hostile_catalogs)."""
    tenant = tenants()
    bomb = respond("200 OK", {"Content-Type": "application/json", "Content-Encoding": "gzip"},
                   gzip_bomb(2 * MAX_BYTES))
    with Listener() as attacker, Listener() as elsewhere, Listener() as tarpit, Listener(drip) as dripping, \
            Listener(bomb) as bombing, Listener(silent_postgres) as postgres, \
            Listener(respond("302 Found", {"Location": f"{elsewhere.url}/v1/config"})) as redirecting:
        listeners = (attacker, elsewhere, tarpit, dripping, bombing, postgres, redirecting)
        pg = f"postgresql://sync:pw@127.0.0.1:{postgres.port}/catalog"
        cases = {  # name: (catalog, the reason of the catalog's Ready and of its sync's Stalled, text of both)
            "backslash": ({"type": "rest", "uri": f"http://127.0.0.1:{attacker.port}\\@catalog.internal/"},
                          "PolicyViolation", "contains a backslash"),
            "userinfo": ({"type": "rest", "uri": f"http://127.0.0.1:{attacker.port}@catalog.internal/"},
                         "PolicyViolation", "has user information"),
            "pg-options": ({"type": "sql", "uri": f"{pg}?host=127.0.0.1&port={elsewhere.port}"},
                           "PolicyViolation", "host"),
            "redirect": ({"type": "rest", "uri": redirecting.url}, NOT_ALLOWED, EMPTY_LIST),
            "tarpit": ({"type": "rest", "uri": tarpit.url}, NOT_ALLOWED, EMPTY_LIST),
            "slow-drip": ({"type": "rest", "uri": dripping.url}, NOT_ALLOWED, EMPTY_LIST),
            "silent-postgres": ({"type": "sql", "uri": pg}, NOT_ALLOWED, EMPTY_LIST),
            "gzip-bomb": ({"type": "rest", "uri": bombing.url}, NOT_ALLOWED, EMPTY_LIST),
        }
        for name, (catalog, _, _) in cases.items():
            create_catalog(tenant.kube, name, catalog)
            tenant.kube.create_sync(f"via-{name}", ref_spec(name))

        for name, (_, reason, text) in cases.items():
            checked = wait_catalog(tenant.admin, name)
            assert checked[:2] == ("False", reason) and text in checked[2], (name, checked)
            assert text in stalled_message(tenant.kube, f"via-{name}", reason), name
            wait_events(tenant.admin, f"via-{name}", [reason])
        assert [listener.connections for listener in listeners] == [0] * len(listeners)
        assert tenant.admin.applications() == {}
        assert operator.liveness() == 200


# --- rows 8 and 9: one tenant's tarpits, another tenant's sync ------------------------------------


def test_a_tenants_tarpits_are_never_contacted_and_leave_another_tenants_sync_served(
        operator: OperatorProcess, tenants: Tenants, cluster_catalog: DeclareCatalog) -> None:
    stalling, steady = tenants(), tenants()
    served = cluster_catalog([steady.namespace])
    with Listener() as tarpit:
        for index in range(TARPITS):
            create_catalog(stalling.kube, f"tarpit-{index}", {"type": "rest", "uri": tarpit.url})
            stalling.kube.create_sync(f"tarpit-{index}", ref_spec(f"tarpit-{index}"))
        # Refused at once: well within one catalog timeout, the time a single tarpit read would hold.
        for index in range(TARPITS):
            assert EMPTY_LIST in not_allowed(stalling.admin, f"tarpit-{index}", timeout=TIMEOUT)
            assert EMPTY_LIST in stalled_message(stalling.kube, f"tarpit-{index}", NOT_ALLOWED)
        steady.kube.create_sync("trips", on(served, fresh_table()))
        steady.admin.wait_applications({"trips-v1"}, timeout=TIMEOUT / 2)
        assert operator.liveness() == 200
        assert tarpit.connections == 0
    assert 'icebergsync_operator_reconciles_total{result="error"}' not in operator.metrics()


# --- rows 1 and 13: a tenant's IcebergCatalog at an internal address, or on a local file -------------


def config_moving_the_uri(to: str) -> bytes:
    """A REST catalog's /v1/config answer that moves the catalog's uri (and adds what the filter drops)."""
    return json.dumps({"defaults": {}, "overrides": {"uri": to, "py-io-impl": "attacker.FileIO"}}).encode()


def test_a_tenants_catalog_at_an_internal_address_gets_no_request(operator: OperatorProcess,
                                                                 tenants: Tenants) -> None:
    tenant = tenants()
    not_found = respond("404 Not Found", {})
    with Listener(not_found) as internal, Listener(not_found) as moved_to, Listener(respond(
            "200 OK", {"Content-Type": "application/json"}, config_moving_the_uri(moved_to.url))) as moving:
        create_catalog(tenant.kube, "internal", {"type": "rest", "uri": f"{internal.url}/internal"})
        create_catalog(tenant.kube, "moving", {"type": "rest", "uri": moving.url})
        tenant.kube.create_sync("via-moving", ref_spec("moving"))
        for name in ("internal", "moving"):
            assert EMPTY_LIST in not_allowed(tenant.admin, name)
        assert EMPTY_LIST in stalled_message(tenant.kube, "via-moving", NOT_ALLOWED)
        wait_events(tenant.admin, "via-moving", [NOT_ALLOWED])
        assert (internal.connections, moving.connections, moved_to.connections) == (0, 0, 0)
    assert tenant.admin.applications() == {}


def test_a_tenants_sqlite_catalog_creates_no_file(operator: OperatorProcess, tenants: Tenants,
                                                  tmp_path: Path) -> None:
    tenant = tenants()
    created = tmp_path / "created.db"
    create_catalog(tenant.kube, "local", {"type": "sql", "uri": f"sqlite:///{created}", "warehouse": str(tmp_path)})
    tenant.kube.create_sync("via-local", ref_spec("local"))
    assert "--allow-local-catalogs" in not_allowed(tenant.admin, "local")
    assert "--allow-local-catalogs" in stalled_message(tenant.kube, "via-local", NOT_ALLOWED)
    wait_events(tenant.admin, "via-local", [NOT_ALLOWED])
    assert not created.exists()
    assert tenant.admin.applications() == {}


# --- the chart's RBAC: enough for everything above, and nothing was refused but tenants' Secrets --------


def test_the_operator_was_refused_nothing_but_tenants_secrets(operator: OperatorProcess) -> None:
    """Runs last: the module's operator log holds no permission problem besides reading a tenant's Secret."""
    problems = [line for line in operator.log().splitlines()
                if PERMISSION_PROBLEM.search(line) and "cannot read Secret" not in line
                and "to check its type" not in line]
    assert problems == []
