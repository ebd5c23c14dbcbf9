"""The catalog resources' models: what an admin declares about a catalog, and what the operator reports.

An ``IcebergCatalog`` serves the syncs of its own namespace and names a Secret there. A
``ClusterIcebergCatalog`` serves the namespaces it lists or selects; its ``secretRef`` lives in the
operator's catalog-secrets namespace and is read by the operator alone (the connection check),
while each served namespace holds its own job credentials under ``jobSecretRef`` (docs/security.md
says why no credential crosses a namespace).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Field

from icebergsync.resource_status import Condition, StatusModel
from icebergsync.spec import IDENTIFIER_PATTERN, K8S_NAME_PATTERN, Catalog, CatalogType, Model, SecretRef

SERVES_SOME_NAMESPACE_MESSAGE = "namespaces or namespaceSelector must say which namespaces this catalog serves"
SELECTOR_VALUES_MESSAGE = "In and NotIn need values; Exists and DoesNotExist take none"
NamespaceName = Annotated[str, Field(pattern=K8S_NAME_PATTERN, max_length=63)]
LABEL_MAX = 317  # a qualified label key: a 253-character prefix, a slash and a 63-character name


class CatalogResourceSpec(Model):
    """The connection both catalog kinds declare."""

    type: CatalogType = Field(description="Catalog implementation: rest (an Iceberg REST catalog) or sql "
                              "(a SQL catalog database, e.g. PostgreSQL).")
    uri: str = Field(min_length=1, max_length=2048,
                     description="Catalog URI: an HTTP(S) URL for rest, a SQLAlchemy URL for sql.")
    warehouse: str | None = Field(default=None, max_length=2048, description="Warehouse location (path or URI).")
    catalog_name: str = Field(
        default="icebergsync", pattern=IDENTIFIER_PATTERN, max_length=253,
        description="The catalog's name in the job (and, for sql, the name its tables are recorded under: "
        "keep an inline catalog's name when moving it to a catalog resource).")
    properties: dict[str, str] = Field(
        default_factory=dict, max_length=64,
        description="Catalog and FileIO properties (not credentials: those belong in the Secret). Values may use "
        "${env:NAME}, expanded by the job from its own environment, never by the operator.")

    def catalog(self, secret_ref: SecretRef | None) -> Catalog:
        """The inline catalog a job of a sync using this resource gets, with the Secret it may mount."""
        return Catalog(type=self.type, uri=self.uri, warehouse=self.warehouse, name=self.catalog_name,
                       properties=self.properties, secret_ref=secret_ref)


class IcebergCatalogSpec(CatalogResourceSpec):
    """An Iceberg catalog the syncs of this namespace may use."""

    secret_ref: SecretRef | None = Field(
        default=None, description="A Secret of this namespace whose keys are added as catalog properties "
        "(credentials): read by the operator, mounted into the jobs of the syncs that use this catalog.")


class LabelSelectorRequirement(Model):
    """One requirement on a namespace's labels."""

    key: str = Field(min_length=1, max_length=LABEL_MAX, description="Label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="How the key's value is tested.")
    values: list[str] = Field(default_factory=list, max_length=64, description="Values for In and NotIn.")


class LabelSelector(Model):
    """A Kubernetes label selector; an empty one selects every namespace."""

    match_labels: dict[str, str] = Field(default_factory=dict, max_length=64,
                                         description="Labels a namespace must have, with these values.")
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, max_length=16,
                                                              description="Requirements a namespace must meet.")

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether namespace ``labels`` satisfy every label and every requirement."""
        if any(labels.get(key) != value for key, value in self.match_labels.items()):
            return False
        return all(_meets(requirement, labels) for requirement in self.match_expressions)


def _meets(requirement: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = requirement.key in labels
    if requirement.operator == "Exists":
        return present
    if requirement.operator == "DoesNotExist":
        return not present
    inside = present and labels[requirement.key] in requirement.values
    return inside if requirement.operator == "In" else not inside


class ClusterIcebergCatalogSpec(CatalogResourceSpec):
    """An Iceberg catalog the syncs of the namespaces it serves may use."""

    namespaces: list[NamespaceName] = Field(
        default_factory=list, max_length=256,
        description="Namespaces whose syncs may use this catalog (with namespaceSelector: either admits).")
    namespace_selector: LabelSelector | None = Field(
        default=None, description="Labels of namespaces whose syncs may use this catalog.")
    secret_ref: SecretRef | None = Field(
        default=None, description="A Secret in the operator's catalog-secrets namespace, read by the operator "
        "alone for this catalog's connection check; never mounted into a job nor used for a sync.")
    job_secret_ref: SecretRef | None = Field(
        default=None, description="A Secret of this name in the namespace of each sync using this catalog, put "
        "there by that namespace's admin: the credentials of that namespace's jobs, mounted into them and used by "
        "the operator to read their tables.")

    def serves(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether syncs of ``namespace`` (with ``labels``) may use this catalog."""
        if namespace in self.namespaces:
            return True
        return self.namespace_selector is not None and self.namespace_selector.matches(labels)


class CatalogStatus(StatusModel):
    """Observed state of a catalog resource, maintained by the operator."""

    observed_generation: int | None = Field(default=None, description="Spec generation the check was made for.")
    last_checked: str | None = Field(default=None, json_schema_extra={"format": "date-time"},
                                     description="When the operator last checked the connection.")
    conditions: list[Condition] = Field(default_factory=list,
                                        description="Ready: whether the operator's connection check succeeded.")

