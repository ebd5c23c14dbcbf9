"""The IcebergCatalog and ClusterIcebergCatalog CRDs, generated from icebergsync.catalogs.model."""

from __future__ import annotations

from typing import Any

from icebergsync.catalogs.model import (
    SELECTOR_VALUES_MESSAGE,
    SERVES_SOME_NAMESPACE_MESSAGE,
    CatalogResourceSpec,
    CatalogStatus,
    ClusterIcebergCatalogSpec,
    IcebergCatalogSpec,
)
from icebergsync.crd import ResourceNames, crd_document, render_yaml
from icebergsync.structural_schema import structural_schema, structural_status_schema

CATALOG_NAMES = ResourceNames("IcebergCatalog", "icebergcatalogs", "icebergcatalog", ("icat",))
CLUSTER_CATALOG_NAMES = ResourceNames("ClusterIcebergCatalog", "clustericebergcatalogs", "clustericebergcatalog",
                                      ("cicat",), scope="Cluster")

_READY = '.status.conditions[?(@.type=="Ready")]'
_COLUMNS = [
    {"name": "Type", "type": "string", "jsonPath": ".spec.type", "description": "Catalog implementation."},
    {"name": "URI", "type": "string", "jsonPath": ".spec.uri", "description": "Catalog URI."},
    {"name": "Ready", "type": "string", "jsonPath": f"{_READY}.status", "description": "Ready condition."},
    {"name": "Reason", "type": "string", "jsonPath": f"{_READY}.reason", "description": "Why, in one word."},
]
_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
_NAMESPACES = {"name": "Namespaces", "type": "string", "jsonPath": ".spec.namespaces",
               "description": "Namespaces listed (a namespaceSelector may admit more)."}

_SELECTOR_RULES = {
    "spec.namespaceSelector.matchExpressions[]": [{
        "rule": "self.operator in ['In', 'NotIn'] ? size(self.values) > 0 : size(self.values) == 0",
        "message": SELECTOR_VALUES_MESSAGE,
    }],
    "spec": [{"rule": "(has(self.namespaces) && size(self.namespaces) > 0) || has(self.namespaceSelector)",
              "message": SERVES_SOME_NAMESPACE_MESSAGE}],
}
_DESCRIPTIONS = {f"spec.{ref}.name": "Name of the Secret." for ref in ("secretRef", "jobSecretRef")}
_NAME_RULE = [{"rule": "size(self.metadata.name) <= 253", "message": "metadata.name must be at most 253 characters"}]


def _document(names: ResourceNames, model: type[CatalogResourceSpec], description: str,
              columns: list[dict[str, str]], rules: dict[str, list[dict[str, str]]]) -> dict[str, Any]:
    spec = structural_schema(model, "spec", _DESCRIPTIONS, rules)
    return crd_document(names, description, spec, structural_status_schema(CatalogStatus), columns, _NAME_RULE)


def build_catalog_crd() -> dict[str, Any]:
    """The IcebergCatalog CustomResourceDefinition document."""
    return _document(CATALOG_NAMES, IcebergCatalogSpec,
                     "An Iceberg catalog the IcebergSyncs of its namespace may use (spec.table.catalogRef).",
                     [*_COLUMNS, _AGE], {})


def build_cluster_catalog_crd() -> dict[str, Any]:
    """The ClusterIcebergCatalog CustomResourceDefinition document."""
    return _document(CLUSTER_CATALOG_NAMES, ClusterIcebergCatalogSpec,
                     "An Iceberg catalog the IcebergSyncs of the namespaces it serves may use "
                     "(spec.table.catalogRef with kind ClusterIcebergCatalog).",
                     [*_COLUMNS, _NAMESPACES, _AGE], _SELECTOR_RULES)


CATALOG_CRDS = {"icebergcatalog.yaml": build_catalog_crd, "clustericebergcatalog.yaml": build_cluster_catalog_crd}


def render_catalog_crds() -> dict[str, str]:
    """Each catalog CRD's committed YAML, by file name under crds/."""
    return {name: render_yaml(build(), "icebergsync/catalogs/model.py") for name, build in CATALOG_CRDS.items()}
