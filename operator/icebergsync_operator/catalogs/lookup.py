"""Resolve a sync's catalog against the API: read the catalog resource (and, for a namespaceSelector,
the sync namespace's labels), then decide with ``resolve``."""

from __future__ import annotations

import logging

from kubernetes.client.rest import ApiException

from icebergsync.catalogs.crd import CATALOG_NAMES, CLUSTER_CATALOG_NAMES
from icebergsync.spec import IcebergSync
from icebergsync_operator.catalogs.resolve import CatalogRefusal, inline_refusal, resolve
from icebergsync_operator.kube import KubeApi
from icebergsync_operator.settings import OperatorSettings

log = logging.getLogger(__name__)


def resolve_sync_catalog(api: KubeApi, settings: OperatorSettings, sync: IcebergSync) -> IcebergSync | CatalogRefusal:
    """The sync with its catalog resolved, or why it may not use it."""
    refusal = inline_refusal(sync, settings.allow_inline_catalogs)
    ref = sync.spec.table.catalog_ref
    if refusal is not None or ref is None:
        return refusal or sync
    namespace = sync.metadata.namespace
    if ref.kind == "IcebergCatalog":
        return resolve(sync, api.get_catalog(CATALOG_NAMES.plural, namespace, ref.name), None)
    found = api.get_catalog(CLUSTER_CATALOG_NAMES.plural, None, ref.name)
    labels: dict[str, str] | None = {}
    if found is not None and (found.get("spec") or {}).get("namespaceSelector") is not None:
        try:
            labels = api.namespace_labels(namespace)
        except ApiException as error:
            log.warning("cannot read the labels of namespace %s: %s %s", namespace, error.status, error.reason)
            labels = None
    return resolve(sync, found, labels)
