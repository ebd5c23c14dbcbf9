"""One check of one catalog resource: read it, connect to its catalog within the deadline, write Ready.

The connection runs through the operator's ``CatalogReads`` like a sync's status read: only where the
catalog's ``CatalogScope`` allows (an IcebergCatalog: under the admin's allow-list, none while it is
empty), in a thread of its own, bounded by ``--catalog-timeout`` and the memory budget, backed off
after a timeout or an answer too large, counted against the namespace (a ClusterIcebergCatalog's:
the catalog-secrets namespace).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from icebergsync.catalogs.crd import CATALOG_NAMES, CLUSTER_CATALOG_NAMES
from icebergsync.catalogs.model import ClusterIcebergCatalogSpec, IcebergCatalogSpec
from icebergsync.crd import ResourceNames
from icebergsync_operator.catalog_access import CatalogAccessError, endpoint_problem
from icebergsync_operator.catalog_scope import NOT_ALLOWED
from icebergsync_operator.catalogs.check import observe_connection
from icebergsync_operator.catalogs.resolve import parse_catalog_spec
from icebergsync_operator.catalogs.status import (
    CONNECTED,
    next_status,
    parse_catalog_status,
    transition_event,
)
from icebergsync_operator.context import OperatorContext
from icebergsync_operator.status_update import FALSE, TRUE, TableObservation, Verdict
from icebergsync_operator.table import CatalogReach, catalog_secret

log = logging.getLogger(__name__)

NAMES: dict[str, ResourceNames] = {names.kind: names for names in (CATALOG_NAMES, CLUSTER_CATALOG_NAMES)}
CLUSTER_KEY_NAMESPACE = "<cluster>"  #: counts a ClusterIcebergCatalog's stuck checks when no secrets namespace is set


def _key(context: OperatorContext, kind: str, namespace: str | None, name: str) -> tuple[str, str]:
    """The catalog reads' key of a catalog resource (never a sync's: those have no slash)."""
    return (namespace or context.settings.catalog_secrets_namespace or CLUSTER_KEY_NAMESPACE, f"{kind}/{name}")


async def _verdict(context: OperatorContext, kind: str, namespace: str | None, name: str,
                   body: Mapping[str, Any]) -> Verdict:
    try:
        spec = parse_catalog_spec(kind, body.get("spec"))
    except ValueError as error:
        return Verdict(FALSE, "InvalidSpec", str(error))
    settings = context.settings
    if isinstance(spec, ClusterIcebergCatalogSpec):
        secret_namespace, ref = settings.catalog_secrets_namespace, spec.secret_ref
        if ref is not None and not secret_namespace:
            return Verdict(FALSE, "SecretUnreadable", f"secretRef {ref.name!r}: the operator has no "
                           "--catalog-secrets-namespace to read ClusterIcebergCatalog Secrets from")
    else:
        assert isinstance(spec, IcebergCatalogSpec) and namespace
        secret_namespace, ref = namespace, spec.secret_ref
    catalog = spec.catalog(ref)
    ambiguous = endpoint_problem(catalog)
    if ambiguous:
        return Verdict(FALSE, "PolicyViolation", f"spec.uri: {ambiguous}")
    scope = settings.catalog_scope(admin_declared=isinstance(spec, ClusterIcebergCatalogSpec))
    refused = scope.refusal(catalog)
    if refused:
        return Verdict(FALSE, NOT_ALLOWED, f"spec.uri: {refused}")
    reach = CatalogReach(settings, scope, context.catalog_reads.memory)

    def check() -> TableObservation:
        try:
            secret = catalog_secret(context.api, secret_namespace, ref)
        except CatalogAccessError as error:
            return TableObservation(error=str(error))
        return observe_connection(catalog, secret, reach)

    observed = await context.catalog_reads.read(_key(context, kind, namespace, name), catalog.uri, check)
    if observed.error is None:
        return Verdict(TRUE, CONNECTED, "the operator's connection check succeeded")
    return Verdict(FALSE, _failure_reason(observed), observed.error)


def _failure_reason(observed: TableObservation) -> str:
    if observed.timed_out:
        return "TimedOut"
    return "TooLarge" if observed.too_large else "Unreachable"


async def check_catalog(context: OperatorContext, kind: str, namespace: str | None, name: str) -> Verdict | None:
    """Check one catalog resource and record its Ready condition; None when it is gone.

    One check of a catalog at a time (a timer and a change may fire together), so each transition
    posts one event.
    """
    async with context.lock(*_key(context, kind, namespace, name)):
        plural = NAMES[kind].plural
        body = await asyncio.to_thread(context.api.get_catalog, plural, namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return None
        ready = await _verdict(context, kind, namespace, name, body)
        previous = parse_catalog_status(body.get("status"))
        status = next_status(previous, ready, int(body["metadata"].get("generation") or 1), datetime.now(UTC))
        event = transition_event(previous, ready)
        if event is not None:
            log.log(logging.INFO if ready.status == TRUE else logging.WARNING, "%s %s: %s: %s", kind,
                    f"{namespace}/{name}" if namespace else name, ready.reason, ready.message)
            await asyncio.to_thread(context.api.post_event, body, *event)
        await asyncio.to_thread(context.api.patch_catalog_status, plural, namespace, name,
                                status.model_dump(by_alias=True, mode="json", exclude_none=True))
        return ready


def forget_catalog(context: OperatorContext, kind: str, namespace: str | None, name: str) -> None:
    """Drop a deleted catalog resource's backoff."""
    context.catalog_reads.forget(_key(context, kind, namespace, name))
