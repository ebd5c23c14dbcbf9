"""Tenants against the chart's admission policy and roles, on the real API server (RBAC enforced).

The objects under test are the chart's own: rendered with ``helm template`` and created as rendered.
A tenant is an impersonated user holding the chart's tenant roles through RoleBindings in a fresh
namespace. This API server runs no controller-manager, so the built-in ``view``/``edit``/``admin``
roles are never filled in by aggregation: the tests bind the chart's roles directly and check that
the built-in roles' aggregation selectors pick them (tests/unit/test_chart_tenants.py checks their rules,
tests/cluster/test_tenant_roles.py the real aggregation).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.conftest import GROUP, PLURAL, VERSION, Kube, wait_for
from tests.e2e.test_helm import CHART, helm
from tests.infra.kube import KubeCluster

SECRET_FIELDS = ("spec.source.files.secretRef", "spec.source.kafka.secretRef", "spec.table.catalog.secretRef")
SCHEMA = [{"name": "id", "type": "long"}]
LAKE = {"name": "db.trips", "catalogRef": {"name": "lake"}}
CATALOGS = "icebergcatalogs"


def spec_naming(field: str, secret: str) -> dict[str, Any]:
    """A valid IcebergSync spec whose ``field`` names ``secret``."""
    ref = {"secretRef": {"name": secret}}
    return {
        "spec.source.files.secretRef": {"source": {"files": {"path": "/in", "format": "json", **ref}},
                                        "schema": SCHEMA, "table": LAKE},
        "spec.source.kafka.secretRef": {"source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": "t", **ref}},
                                        "schema": SCHEMA, "table": LAKE},
        "spec.table.catalog.secretRef": {"source": {"generator": {}},
                                         "table": {"name": "db.trips", "catalog": {"uri": "sqlite:///lake.db", **ref}}},
    }[field]


def secret_named(sync: dict[str, Any] | None, field: str) -> str:
    """The Secret a stored sync names in ``field``."""
    value: Any = sync
    for key in field.split("."):
        value = value[key]
    return str(value["name"])


@dataclass(frozen=True)
class ChartRoles:
    """The chart's tenant ClusterRoles (by the built-in role each aggregates into) and their labels."""

    names: dict[str, str]
    labels: dict[str, dict[str, str]]


@pytest.fixture(scope="module")
def chart_roles(operator_crds: KubeCluster) -> Iterator[ChartRoles]:
    """The admission policies, their bindings and the tenant roles of the rendered chart, created for the module."""
    release = f"tenants-{uuid.uuid4().hex[:5]}"
    docs = [doc for doc in yaml.safe_load_all(helm(operator_crds, "template", release, str(CHART))) if doc]
    with operator_crds.api_client() as admin:
        admission, rbac = client.AdmissionregistrationV1Api(admin), client.RbacAuthorizationV1Api(admin)
        actions: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
            "ValidatingAdmissionPolicy": (admission.create_validating_admission_policy,
                                          admission.delete_validating_admission_policy),
            "ValidatingAdmissionPolicyBinding": (admission.create_validating_admission_policy_binding,
                                                 admission.delete_validating_admission_policy_binding),
            "ClusterRole": (rbac.create_cluster_role, rbac.delete_cluster_role),
        }
        created = [doc for doc in docs if doc["kind"] in actions
                   and (doc["kind"] != "ClusterRole" or _aggregated_into(doc))]
        assert {doc["kind"] for doc in created} == set(actions), "the chart renders no admission policy or tenant role"
        for doc in created:
            actions[doc["kind"]][0](doc)
        roles = [doc for doc in created if doc["kind"] == "ClusterRole"]
        yield ChartRoles({_aggregated_into(r): r["metadata"]["name"] for r in roles},
                         {_aggregated_into(r): r["metadata"]["labels"] for r in roles})
        for doc in reversed(created):
            actions[doc["kind"]][1](doc["metadata"]["name"])


def _aggregated_into(role: dict[str, Any]) -> str:
    prefix = "rbac.authorization.k8s.io/aggregate-to-"
    return next((key.removeprefix(prefix) for key in role["metadata"].get("labels", {}) if key.startswith(prefix)), "")


@dataclass
class Tenant:
    """An impersonated user of one namespace."""

    user: str
    namespace: str
    api_client: client.ApiClient

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    def create(self, name: str, spec: dict[str, Any], plural: str = PLURAL) -> dict[str, Any]:
        kind = {PLURAL: "IcebergSync", CATALOGS: "IcebergCatalog"}[plural]
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}, "spec": spec}
        return dict(self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, body))

    def patch(self, name: str, patch: dict[str, Any], plural: str = PLURAL) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name, patch)

    def refused(self, action: Callable[[], Any], status: int = 403) -> str:
        """Run ``action``; it must fail with ``status``; the API server's message."""
        with pytest.raises(ApiException) as caught:
            action()
        assert caught.value.status == status, caught.value.body
        return str(caught.value.body)


@pytest.fixture
def tenant(kube: Kube, chart_roles: ChartRoles, operator_crds: KubeCluster) -> Callable[..., Tenant]:
    """``tenant(role, readable)``: a new user bound to the chart's ``role`` in the test's namespace, who may
    create Secrets but get only those named in ``readable``."""
    rbac = client.RbacAuthorizationV1Api(kube.api_client)

    def make(role: str, readable: tuple[str, ...] = ()) -> Tenant:
        user = f"tenant-{uuid.uuid4().hex[:6]}"
        subject = [client.RbacV1Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")]
        rules = [client.V1PolicyRule(api_groups=[""], resources=["secrets"], verbs=["create"])]
        if readable:
            rules.append(client.V1PolicyRule(api_groups=[""], resources=["secrets"], verbs=["get"],
                                             resource_names=list(readable)))
        rbac.create_namespaced_role(kube.namespace, client.V1Role(metadata=client.V1ObjectMeta(name=user), rules=rules))
        for kind, name in (("Role", user), ("ClusterRole", chart_roles.names[role])):
            rbac.create_namespaced_role_binding(kube.namespace, client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name=f"{user}-{name}"), subjects=subject,
                role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind=kind, name=name)))
        api = operator_crds.api_client()
        api.set_default_header("Impersonate-User", user)
        return Tenant(user, kube.namespace, api)

    return make


def _forbidden(action: Callable[[], Any]) -> bool:
    try:
        action()
    except ApiException as error:
        return error.status == 403
    return False


def create_token_secret(tenant: Tenant, name: str = "token") -> None:
    """A service-account token Secret, created by the tenant, who cannot read it back."""
    core = client.CoreV1Api(tenant.api_client)
    core.create_namespaced_secret(tenant.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, annotations={"kubernetes.io/service-account.name": "default"}),
        type="kubernetes.io/service-account-token"))
    tenant.refused(lambda: core.read_namespaced_secret(name, tenant.namespace))


def wait_enforced(tenant: Tenant) -> None:
    """Wait until the API server enforces the new policy (it loads policies asynchronously)."""
    def enforced() -> bool:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "IcebergSync", "metadata": {"name": "probe"},
                "spec": spec_naming(SECRET_FIELDS[0], "token")}
        try:
            tenant.custom.create_namespaced_custom_object(GROUP, VERSION, tenant.namespace, PLURAL, body, dry_run="All")
        except ApiException as error:
            return error.status == 403 and "may not get Secret" in str(error.body)
        return False

    wait_for("the admission policy to be enforced", enforced, timeout=30)


@pytest.mark.parametrize("field", SECRET_FIELDS)
def test_a_tenant_cannot_name_a_secret_it_cannot_read(tenant: Callable[..., Tenant], kube: Kube, field: str) -> None:
    author = tenant("edit", readable=("readable",))
    create_token_secret(author)
    kube.core.create_namespaced_secret(kube.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="readable"), string_data={"k": "v"}))
    wait_enforced(author)

    message = author.refused(lambda: author.create("stolen", spec_naming(field, "token")))
    assert f"{field}: {author.user} may not get Secret token in namespace {kube.namespace}" in message
    assert kube.get_sync("stolen") is None
    # A Secret that does not exist is refused too: it could be created later by someone else.
    assert f"{field}: {author.user} may not get Secret later" in author.refused(
        lambda: author.create("later", spec_naming(field, "later")))

    author.create("mine", spec_naming(field, "readable"))
    other = spec_naming(field, "token")
    message = author.refused(lambda: author.patch("mine", {"spec": other}))
    assert f"{field}: {author.user} may not get Secret token" in message
    assert secret_named(kube.get_sync("mine"), field) == "readable"
    # An update keeping its Secrets is not checked again (as the operator's own patches), even once the
    # author's rights on them are gone.
    client.RbacAuthorizationV1Api(kube.api_client).delete_namespaced_role(author.user, kube.namespace)
    core = client.CoreV1Api(author.api_client)
    wait_for("the author's rights to go", lambda: _forbidden(lambda: core.read_namespaced_secret("readable",
                                                                                                 kube.namespace)))
    author.patch("mine", {"spec": {"suspend": True}})


def test_a_catalog_may_name_only_a_secret_its_author_can_read(tenant: Callable[..., Tenant]) -> None:
    author = tenant("admin", readable=("readable",))
    create_token_secret(author)
    wait_enforced(author)
    catalog = {"type": "rest", "uri": "http://catalog:8181"}
    message = author.refused(lambda: author.create("lake", {**catalog, "secretRef": {"name": "token"}}, CATALOGS))
    assert f"spec.secretRef: {author.user} may not get Secret token" in message
    author.create("lake", {**catalog, "secretRef": {"name": "readable"}}, CATALOGS)


def test_tenant_roles_edit_view_admin(tenant: Callable[..., Tenant], chart_roles: ChartRoles, kube: Kube) -> None:
    editor, viewer, admin = tenant("edit"), tenant("view"), tenant("admin")
    spec = spec_naming(SECRET_FIELDS[2], "x") | {"table": {"name": "db.trips", "catalogRef": {"name": "lake"}}}
    editor.create("trips", spec)
    editor.patch("trips", {"spec": {"suspend": True}})
    status = {"status": {"phase": "Running"}}
    for who in (editor, viewer, admin):  # only the operator writes status
        who.refused(lambda who=who: who.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, kube.namespace, PLURAL, "trips", status))
        assert who.custom.list_namespaced_custom_object(GROUP, VERSION, kube.namespace, PLURAL)["items"]
        who.refused(lambda who=who: who.custom.list_cluster_custom_object(GROUP, VERSION, "clustericebergcatalogs"))
    catalog = {"type": "rest", "uri": "http://catalog:8181"}
    editor.refused(lambda: editor.create("lake", catalog, CATALOGS))
    viewer.refused(lambda: viewer.create("other", spec))
    viewer.refused(lambda: viewer.patch("trips", {"spec": {"suspend": False}}))
    admin.create("lake", catalog, CATALOGS)
    assert editor.custom.get_namespaced_custom_object(GROUP, VERSION, kube.namespace, CATALOGS, "lake")
    admin.patch("lake", {"spec": {"warehouse": "s3://w"}}, CATALOGS)
    editor.custom.delete_namespaced_custom_object(GROUP, VERSION, kube.namespace, PLURAL, "trips")

    # The built-in roles' aggregation selectors pick the chart's roles (what the controller-manager, absent here,
    # would aggregate).
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    for role, labels in chart_roles.labels.items():
        selectors = rbac.read_cluster_role(role).aggregation_rule.cluster_role_selectors
        assert any(all(labels.get(key) == value for key, value in (s.match_labels or {}).items())
                   for s in selectors), role
