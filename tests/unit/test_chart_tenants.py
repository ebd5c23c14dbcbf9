"""What the chart gives tenants: the admission policy binding every Secret a resource names to its
author's rights (checked against every secret-ref field of the CRDs, so a new one cannot slip past),
and the tenant roles aggregated into view, edit and admin."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_chart import FULLNAME, of_kind, one, render, rules_of

REPO_ROOT = Path(__file__).resolve().parents[2]
# Namespaced kinds whose Secrets the policy checks; ClusterIcebergCatalogs are the cluster admin's.
CHECKED = {"icebergsyncs": "icebergsync.yaml", "icebergcatalogs": "icebergcatalog.yaml"}
UNCHECKED = {"clustericebergcatalogs": "clustericebergcatalog.yaml"}
AUTHORIZER = ("authorizer.group('').resource('secrets').namespace(object.metadata.namespace)"
              ".name(variables.{}).check('get').allowed()")
READ = {"get", "list", "watch"}
WRITE = READ | {"create", "update", "patch", "delete", "deletecollection"}


def _names_a_secret(key: str, schema: dict[str, Any]) -> bool:
    """A secretRef by name, or of a secret-ref shape: an object whose ``name`` is a Secret's."""
    name = (schema.get("properties") or {}).get("name") or {}
    return "secretref" in key.lower() or "Secret" in str(name.get("description", ""))


def secret_ref_paths(schema: dict[str, Any], path: str = "") -> list[str]:
    """Every field of an openAPI schema that names a Secret (``[]``: a list's items, ``*``: a map's values)."""
    found = []
    for key, child in (schema.get("properties") or {}).items():
        here = f"{path}.{key}" if path else key
        if _names_a_secret(key, child):
            found.append(here)
        found += secret_ref_paths(child, here)
    if "items" in schema:
        found += secret_ref_paths(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        found += secret_ref_paths(schema["additionalProperties"], f"{path}.*")
    return found


def crd_secret_refs(file: str) -> set[str]:
    crd = yaml.safe_load((REPO_ROOT / "crds" / file).read_text())
    return {path for version in crd["spec"]["versions"]
            for path in secret_ref_paths(version["schema"]["openAPIV3Schema"])}


def policies(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rendered policies by the resource each matches."""
    found = {}
    for policy in of_kind(docs, "ValidatingAdmissionPolicy"):
        [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
        assert rule["apiGroups"] == ["icebergsync.io"] and rule["operations"] == ["CREATE", "UPDATE"]
        [resource] = rule["resources"]
        found[resource] = policy
    return found


def checked_paths(policy: dict[str, Any]) -> set[str]:
    """The fields a policy checks: for each validation, the path of the variable it asks the authorizer about
    (unless unset, or unchanged by an update)."""
    spec = policy["spec"]
    variables = {variable["name"]: variable["expression"] for variable in spec["variables"]}
    paths = set()
    for validation in spec["validations"]:
        expression = " ".join(validation["expression"].split())
        [name] = re.findall(r"\.name\(variables\.(\w+)\)", expression)
        old = f"old{name[0].upper()}{name[1:]}"
        assert expression == f"variables.{name} == '' || variables.{name} == variables.{old} || {AUTHORIZER.format(name)}"
        match = re.fullmatch(r"object\.\?([\w.?]+)\.\?name\.orValue\(''\)", variables[name])
        assert match, variables[name]
        assert variables[old] == f"oldObject == null ? '' : oldObject{variables[name].removeprefix('object')}"
        path = match.group(1).replace(".?", ".")
        assert validation["messageExpression"].startswith(f"'{path}: '")
        paths.add(path)
    return paths


def test_the_crds_secret_refs_are_the_known_ones() -> None:
    """The walk finds what is there (were it to find nothing, the coverage test below would prove nothing)."""
    assert crd_secret_refs("icebergsync.yaml") == {
        "spec.source.files.secretRef", "spec.source.kafka.secretRef", "spec.table.catalog.secretRef"}
    assert crd_secret_refs("clustericebergcatalog.yaml") == {"spec.secretRef", "spec.jobSecretRef"}


@pytest.mark.parametrize("resource", sorted(CHECKED))
def test_the_policy_checks_every_secret_ref_of_the_crd(helm_binary: Path, tmp_path: Path, resource: str) -> None:
    policy = policies(render(helm_binary, tmp_path))[resource]
    assert checked_paths(policy) == crd_secret_refs(CHECKED[resource])
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_each_policy_is_bound_to_deny_and_can_be_turned_off(helm_binary: Path, tmp_path: Path) -> None:
    docs = render(helm_binary, tmp_path)
    assert sorted(policies(docs)) == sorted(CHECKED)
    assert not set(policies(docs)) & set(UNCHECKED)
    for resource, policy in policies(docs).items():
        name = policy["metadata"]["name"]
        assert name == f"{FULLNAME}-{resource}-secret-refs"
        binding = one(docs, "ValidatingAdmissionPolicyBinding", name)
        assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    off = render(helm_binary, tmp_path, {"admission": {"secretRefs": False}})
    assert not of_kind(off, "ValidatingAdmissionPolicy") and not of_kind(off, "ValidatingAdmissionPolicyBinding")


def tenant_roles(docs: list[dict[str, Any]]) -> dict[str, dict[tuple[str, str], set[str]]]:
    """The tenant ClusterRoles' rules by the built-in role each aggregates into (one label each)."""
    found = {}
    for role in of_kind(docs, "ClusterRole"):
        labels = [key for key in role["metadata"]["labels"] if key.startswith("rbac.authorization.k8s.io/aggregate")]
        if labels:
            [label] = labels
            assert role["metadata"]["labels"][label] == "true"
            target = label.removeprefix("rbac.authorization.k8s.io/aggregate-to-")
            assert role["metadata"]["name"] == f"{FULLNAME}-{target}"
            found[target] = rules_of(role)
    return found


def test_tenant_roles_aggregate_into_view_edit_and_admin(helm_binary: Path, tmp_path: Path) -> None:
    syncs, catalogs = ("icebergsync.io", "icebergsyncs"), ("icebergsync.io", "icebergcatalogs")
    assert tenant_roles(render(helm_binary, tmp_path)) == {
        "view": {syncs: READ, catalogs: READ},
        "edit": {syncs: WRITE, catalogs: READ},
        "admin": {syncs: WRITE, catalogs: WRITE},
    }  # no status subresource, no ClusterIcebergCatalog
    assert tenant_roles(render(helm_binary, tmp_path, {"rbac": {"tenantRoles": False}})) == {}
