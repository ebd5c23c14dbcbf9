"""Which catalog a sync uses (pure): the catalog resource its ``catalogRef`` names, or, when the admin
allows it, the catalog declared inline.

A resolved sync carries the resource's connection as an inline ``spec.table.catalog`` whose
``secretRef`` is the one Secret the resource names for the sync's namespace; the rest of the
operator (policy, status reads, rendering) and the job see only that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from icebergsync.catalogs.model import CatalogResourceSpec, ClusterIcebergCatalogSpec, IcebergCatalogSpec
from icebergsync.spec import Catalog, IcebergSync, shown
from icebergsync_operator.catalog_scope import NOT_ALLOWED, CatalogScope

INLINE_REFUSED = "InlineCatalogRefused"
NOT_FOUND = "CatalogNotFound"
NOT_SERVED = "CatalogNotServed"
INVALID = "InvalidCatalog"

SPEC_MODELS: dict[str, type[CatalogResourceSpec]] = {
    "IcebergCatalog": IcebergCatalogSpec, "ClusterIcebergCatalog": ClusterIcebergCatalogSpec,
}


@dataclass(frozen=True)
class CatalogRefusal:
    """Why a sync may not use the catalog it names: the condition's reason and a message."""

    reason: str
    message: str


def inline_refusal(sync: IcebergSync, allow_inline: bool) -> CatalogRefusal | None:
    """A refusal for a sync without a catalogRef, unless the operator allows inline catalogs."""
    if allow_inline or sync.spec.table.catalog_ref is not None:
        return None
    declared = "declares its catalog inline" if sync.spec.table.catalog else "names no catalog"
    return CatalogRefusal(INLINE_REFUSED, f"spec.table.catalog: the sync {declared}, and this operator accepts only "
                          "catalog resources: set spec.table.catalogRef to an IcebergCatalog of this namespace or a "
                          "ClusterIcebergCatalog serving it (docs/catalogs.md)")


def parse_catalog_spec(kind: str, raw: Mapping[str, Any] | None) -> CatalogResourceSpec:
    """A catalog resource's spec; ``ValueError`` listing what is invalid."""
    try:
        return SPEC_MODELS[kind].model_validate(raw or {})
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(part) for part in item['loc']) or 'spec'}: {item['msg']}"
                             for item in error.errors())
        raise ValueError(problems) from None


def with_catalog(sync: IcebergSync, catalog: Catalog) -> IcebergSync:
    """``sync`` with ``catalog`` inline in place of its catalogRef."""
    table = sync.spec.table.model_copy(update={"catalog": catalog, "catalog_ref": None})
    return sync.model_copy(update={"spec": sync.spec.model_copy(update={"table": table})})


def resolve(sync: IcebergSync, found: Mapping[str, Any] | None,
            namespace_labels: Mapping[str, str] | None) -> IcebergSync | CatalogRefusal:
    """The sync with the catalog its catalogRef names, or why it may not use it.

    ``found`` is the catalog resource (None: it does not exist); ``namespace_labels`` the sync
    namespace's labels (None: they could not be read), needed only by a ClusterIcebergCatalog's
    namespaceSelector.
    """
    ref = sync.spec.table.catalog_ref
    assert ref is not None, "only a sync with a catalogRef is resolved"
    namespace = sync.metadata.namespace
    where = f"{ref.kind} {ref.name!r}" + (f" in namespace {namespace}" if ref.kind == "IcebergCatalog" else "")
    if found is None:
        return CatalogRefusal(NOT_FOUND, f"spec.table.catalogRef: {where} does not exist")
    try:
        spec = parse_catalog_spec(ref.kind, found.get("spec"))
    except ValueError as error:
        return CatalogRefusal(INVALID, f"spec.table.catalogRef: {where} is invalid: {shown(str(error))}")
    if isinstance(spec, ClusterIcebergCatalogSpec):
        listed = namespace in spec.namespaces
        if not listed and spec.namespace_selector is not None and namespace_labels is None:
            return CatalogRefusal(NOT_SERVED, f"spec.table.catalogRef: the labels of namespace {namespace} cannot "
                                  f"be read to match the namespaceSelector of {where}")
        if not spec.serves(namespace, namespace_labels or {}):
            return CatalogRefusal(NOT_SERVED, f"spec.table.catalogRef: {where} does not serve namespace {namespace} "
                                  "(neither its namespaces nor its namespaceSelector admit it)")
        return with_catalog(sync, spec.catalog(spec.job_secret_ref))
    assert isinstance(spec, IcebergCatalogSpec)
    return with_catalog(sync, spec.catalog(spec.secret_ref))


def admin_declared(sync: IcebergSync) -> bool:
    """Whether the sync's catalog is a ClusterIcebergCatalog (declared by the cluster admin, not a tenant)."""
    ref = sync.spec.table.catalog_ref
    return ref is not None and ref.kind == "ClusterIcebergCatalog"


def scope_refusal(resolved: IcebergSync, scope: CatalogScope, field: str) -> CatalogRefusal | None:
    """A refusal when the operator may not contact the resolved sync's catalog (``field``: where its URI came from)."""
    why = scope.refusal(resolved.spec.table.catalog_or_default)
    return None if why is None else CatalogRefusal(NOT_ALLOWED, f"{field}: {why}")


def job_spec(raw_spec: Mapping[str, Any], sync: IcebergSync) -> dict[str, Any]:
    """The spec a job reads: as stored, with a catalogRef replaced by the catalog it resolved to."""
    table = dict(raw_spec.get("table") or {})
    if "catalogRef" not in table:
        return dict(raw_spec)
    del table["catalogRef"]
    table["catalog"] = sync.spec.table.catalog_or_default.model_dump(by_alias=True, exclude_none=True, mode="json")
    return {**raw_spec, "table": table}
