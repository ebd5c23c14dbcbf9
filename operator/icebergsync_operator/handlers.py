"""Thin kopf handlers: each one names a sync and awaits ``lifecycle``; nothing else happens here.

They are coroutines: a sync handler would hold a thread of kopf's shared executor while its
sync's catalog is read, and a few tarpit catalogs would hold them all.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from icebergsync_operator.constants import (
    FINALIZER,
    KOPF_STORAGE_PREFIX,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    SPARK_GROUP,
    SPARK_PLURAL,
    SPARK_VERSION,
    SYNC_GROUP,
    SYNC_LABEL,
    SYNC_PLURAL,
    SYNC_VERSION,
)
from icebergsync_operator.context import OperatorContext
from icebergsync_operator.lifecycle import finalize_sync, reconcile_sync

SYNCS = (SYNC_GROUP, SYNC_VERSION, SYNC_PLURAL)
APPLICATIONS = (SPARK_GROUP, SPARK_VERSION, SPARK_PLURAL)


def _namespaced(namespace: str | None) -> str:
    if not namespace:
        raise kopf.PermanentError("IcebergSyncs and SparkApplications are namespaced")
    return namespace


def register(registry: kopf.OperatorRegistry, context: OperatorContext) -> None:
    """Register every handler of the operator on ``registry``."""

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(id="configure", registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = FINALIZER
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_STORAGE_PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=KOPF_STORAGE_PREFIX, key="last-handled-configuration")
        settings.posting.level = logging.WARNING  # our own events say what happened; kopf adds only problems

    @kopf.on.resume(*SYNCS, id="reconcile", registry=registry)
    @kopf.on.create(*SYNCS, id="reconcile", registry=registry)
    @kopf.on.update(*SYNCS, id="reconcile", field="spec", registry=registry)
    async def on_sync_change(namespace: str | None, name: str, **_: Any) -> None:
        await reconcile_sync(context, _namespaced(namespace), name)

    @kopf.timer(*SYNCS, id="refresh", interval=context.settings.timer_interval, registry=registry)
    async def on_timer(namespace: str | None, name: str, **_: Any) -> None:
        await reconcile_sync(context, _namespaced(namespace), name)

    @kopf.on.event(*APPLICATIONS, labels={MANAGED_BY_LABEL: MANAGED_BY, SYNC_LABEL: kopf.PRESENT},
                   id="application-changed", registry=registry)
    async def on_application_event(namespace: str | None, labels: kopf.Labels, **_: Any) -> None:
        await reconcile_sync(context, _namespaced(namespace), labels[SYNC_LABEL])

    @kopf.on.delete(*SYNCS, id="finalize", registry=registry)
    async def on_sync_delete(namespace: str | None, name: str, **_: Any) -> None:
        await finalize_sync(context, _namespaced(namespace), name)

    @kopf.on.probe(id="reconciles", registry=registry)
    async def reconciles(**_: Any) -> dict[str, object]:
        """Fail liveness (HTTP 500) while a reconcile has run longer than --reconcile-stuck-after."""
        stuck = context.watch.stuck()
        if stuck:
            raise kopf.PermanentError(f"reconciles running longer than {context.settings.reconcile_stuck_after:g}s: "
                                      f"{', '.join(stuck)}")
        return context.watch.report()
