"""The chart's tenant roles through Kubernetes' own aggregation (the controller-manager's
clusterrole-aggregation controller, which the e2e API server lacks): a user bound to the built-in
``view``, ``edit`` or ``admin`` role in a namespace gets exactly the rights the chart gives it on
IcebergSyncs and IcebergCatalogs, and none on a status subresource or on ClusterIcebergCatalogs."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from kubernetes import client

from tests.cluster.product import wait_for
from tests.infra.cluster import NodeCluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "icebergsync"
ROLES = ("view", "edit", "admin")
# (verb, resource, subresource) -> the built-in roles that may do it, in the namespace they are bound in.
EXPECTED: dict[tuple[str, str, str], set[str]] = {
    ("list", "icebergsyncs", ""): {"view", "edit", "admin"},
    ("create", "icebergsyncs", ""): {"edit", "admin"},
    ("patch", "icebergsyncs", ""): {"edit", "admin"},
    ("delete", "icebergsyncs", ""): {"edit", "admin"},
    ("patch", "icebergsyncs", "status"): set(),
    ("update", "icebergsyncs", "status"): set(),
    ("get", "icebergcatalogs", ""): {"view", "edit", "admin"},
    ("create", "icebergcatalogs", ""): {"admin"},
    ("patch", "icebergcatalogs", "status"): set(),
    ("list", "clustericebergcatalogs", ""): set(),
}


def allowed(api: client.ApiClient, user: str, namespace: str, verb: str, resource: str, subresource: str) -> bool:
    """The API server's RBAC decision for ``user`` (a SubjectAccessReview, as the admin)."""
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=user, groups=["system:authenticated"], resource_attributes=client.V1ResourceAttributes(
            verb=verb, group="icebergsync.io", resource=resource, subresource=subresource or None,
            namespace=namespace)))
    return bool(client.AuthorizationV1Api(api).create_subject_access_review(review).status.allowed)


def test_the_builtin_roles_aggregate_the_charts_tenant_roles(node_cluster: NodeCluster, namespace: str,
                                                             helm_binary: Path) -> None:
    rendered = subprocess.run(
        [str(helm_binary), "template", f"roles-{uuid.uuid4().hex[:5]}", str(CHART),
         "--show-only", "templates/tenant-rbac.yaml"], capture_output=True, text=True, timeout=120, check=True).stdout
    node_cluster.kubectl("apply", "-f", "-", stdin=rendered)
    try:
        for role in ROLES:
            node_cluster.kubectl("-n", namespace, "create", "rolebinding", f"tenant-{role}", f"--clusterrole={role}",
                                 f"--user=tenant-{role}")
        with node_cluster.api_client() as api:
            wait_for("the built-in roles to aggregate the chart's", lambda: all(
                allowed(api, f"tenant-{role}", namespace, "list", "icebergsyncs", "") for role in ROLES)
                and allowed(api, "tenant-admin", namespace, "create", "icebergcatalogs", ""), timeout=60)
            for (verb, resource, subresource), roles in EXPECTED.items():
                for role in ROLES:
                    assert allowed(api, f"tenant-{role}", namespace, verb, resource, subresource) == (
                        role in roles), (role, verb, resource, subresource)
    finally:
        node_cluster.kubectl("delete", "-f", "-", stdin=rendered)
