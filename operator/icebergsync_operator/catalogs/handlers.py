"""Thin kopf handlers of the catalog resources: each awaits ``lifecycle.check_catalog``.

A catalog is checked when it appears or its spec changes, and again every timer period, so its
Ready condition follows the catalog. No finalizer: deleting one needs nothing from the operator
(a sync naming a deleted catalog is refused at its next reconcile).
"""

from __future__ import annotations

from typing import Any

import kopf

from icebergsync.catalogs.crd import CATALOG_NAMES, CLUSTER_CATALOG_NAMES
from icebergsync.crd import ResourceNames
from icebergsync_operator.catalogs.lifecycle import check_catalog, forget_catalog
from icebergsync_operator.constants import SYNC_GROUP, SYNC_VERSION
from icebergsync_operator.context import OperatorContext


def register(registry: kopf.OperatorRegistry, context: OperatorContext) -> None:
    """Register the handlers of both catalog kinds on ``registry``."""
    for names in (CATALOG_NAMES, CLUSTER_CATALOG_NAMES):
        _register_kind(registry, context, names)


def _register_kind(registry: kopf.OperatorRegistry, context: OperatorContext, names: ResourceNames) -> None:
    resource = (SYNC_GROUP, SYNC_VERSION, names.plural)
    kind, check_id = names.kind, f"check-{names.singular}"

    @kopf.on.resume(*resource, id=check_id, registry=registry)
    @kopf.on.create(*resource, id=check_id, registry=registry)
    @kopf.on.update(*resource, id=check_id, field="spec", registry=registry)
    async def on_change(namespace: str | None, name: str, **_: Any) -> None:
        await check_catalog(context, kind, namespace, name)

    @kopf.timer(*resource, id=f"recheck-{names.singular}", interval=context.settings.timer_interval,
                registry=registry)
    async def on_timer(namespace: str | None, name: str, **_: Any) -> None:
        await check_catalog(context, kind, namespace, name)

    @kopf.on.delete(*resource, id=f"forget-{names.singular}", optional=True, registry=registry)
    def on_delete(namespace: str | None, name: str, **_: Any) -> None:
        forget_catalog(context, kind, namespace, name)
