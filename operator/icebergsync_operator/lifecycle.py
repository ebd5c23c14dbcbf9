"""One reconcile of one sync: observe (API + table), decide (pure), act (launch, delete, events, status).

Every handler awaits ``reconcile_sync``; it re-reads everything, so it is safe to call for any reason
and any number of times. A per-sync lock keeps two handlers of this process from acting on the
same sync at once; peering keeps other replicas out (see docs/operator.md).

The reconcile runs on kopf's event loop: the Kubernetes API calls (a trusted, quick server) in
asyncio's executor, the catalog read (a tenant's server) in a thread of its own with a deadline
(``catalog_reads``), so no tenant's catalog can hold a thread that another sync needs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from icebergsync.errors import SpecError
from icebergsync.spec import IcebergSync, parse_spec, qualified_sink_id
from icebergsync.tables.cuts import spec_cut_support
from icebergsync_operator import metrics
from icebergsync_operator.applications import parse_application
from icebergsync_operator.catalog_scope import CatalogScope
from icebergsync_operator.catalogs.lookup import resolve_sync_catalog
from icebergsync_operator.catalogs.resolve import CatalogRefusal, admin_declared, scope_refusal
from icebergsync_operator.cleanup import delete_applications, delete_everything
from icebergsync_operator.context import OperatorContext
from icebergsync_operator.launch import launch
from icebergsync_operator.policy import catalog_uri_field, policy_problems
from icebergsync_operator.reconcile import Decision, Observation, decide
from icebergsync_operator.render import spec_document
from icebergsync_operator.secret_refs import SecretCheck, catalog_secret_field, check_secrets, named_secrets
from icebergsync_operator.status_update import TableObservation, parse_status
from icebergsync_operator.table import CatalogReach, observe_table

log = logging.getLogger(__name__)
CATALOG_UNREACHABLE_REASONS = frozenset({"CatalogUnreachable", "WaitingForCatalog"})  # metrics.CATALOG_UNREACHABLE

DEFAULT_COMMIT_INTERVAL = 30.0


@dataclass(frozen=True)
class Reading:
    """The sync as stored, its parsed spec (None when invalid) and what is wrong with it."""

    body: Mapping[str, Any]
    sync: IcebergSync | None  #: with its catalogRef resolved (when it could be)
    spec_problems: tuple[str, ...]
    policy_problems: tuple[str, ...]
    catalog_refusal: CatalogRefusal | None = None
    scope: CatalogScope | None = None  #: where the operator may go for the sync's catalog (None: not resolved)
    secrets: SecretCheck = field(default_factory=SecretCheck)  #: the types of the Secrets it names (read only for an allowed spec)

    @property
    def table_readable(self) -> bool:
        """Whether the table is read: never for an invalid, refused or suspended spec."""
        return (self.sync is not None and not self.sync.spec.suspend and not self.policy_problems
                and self.catalog_refusal is None and not self.secrets.problems)


def read_spec(context: OperatorContext, body: Mapping[str, Any]) -> Reading:
    """Parse the stored spec, resolve its catalog (reading the catalog resource), check the policy and that the
    operator may contact the catalog, then the types of the Secrets it names."""
    metadata = body["metadata"]
    try:
        sync: IcebergSync | None = parse_spec(spec_document(metadata["name"], metadata["namespace"],
                                                            body.get("spec") or {}))
        problems: tuple[str, ...] = ()
    except SpecError as error:
        sync, problems = None, tuple(error.problems)
    resolved = resolve_sync_catalog(context.api, context.settings, sync) if sync is not None else None
    if isinstance(resolved, CatalogRefusal):
        return Reading(body, sync, problems, (), resolved)
    if resolved is None or sync is None:
        return Reading(body, resolved, problems, ())
    uri_field = catalog_uri_field(sync)
    scope = context.settings.catalog_scope(admin_declared(sync))
    refused = policy_problems(resolved, context.settings, uri_field)
    not_allowed = scope_refusal(resolved, scope, uri_field)
    if refused or not_allowed:
        return Reading(body, resolved, problems, refused, not_allowed, scope)
    namespace = metadata["namespace"]
    secrets = check_secrets(lambda name: context.api.secret_type(namespace, name),
                            named_secrets(resolved, catalog_secret_field(sync)))
    return Reading(body, resolved, problems, refused, scope=scope, secrets=secrets)


def observe(context: OperatorContext, reading: Reading, table: TableObservation,
            now: datetime) -> Observation:
    """Everything ``decide`` needs: the reading, the sync's applications (listed now) and the table."""
    body, sync, problems, refused = reading.body, reading.sync, reading.spec_problems, reading.policy_problems
    metadata = body["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]
    raw_spec = body.get("spec") or {}
    applications = [parse_application(app) for app in context.api.list_applications(namespace, name)]
    return Observation(
        name=name,
        namespace=namespace,
        generation=int(metadata.get("generation") or 1),
        sink_id=sync.sink_id if sync else qualified_sink_id(namespace, name, str(raw_spec.get("sinkId") or name)),
        table_name=sync.spec.table.name if sync else str((raw_spec.get("table") or {}).get("name", "")),
        suspend=bool(raw_spec.get("suspend")),
        commit_interval=sync.spec.commit.interval_seconds if sync else DEFAULT_COMMIT_INTERVAL,
        spec_problems=problems,
        previous=parse_status(body.get("status")),
        applications=tuple(app for app in applications if app is not None),
        table=table,
        now=now,
        source_bounded=sync.spec.source.bounded if sync else False,
        source_exhausted=bool(sync and table.sink and sync.spec.source.exhausted(table.sink.frontier)),
        policy_problems=refused,
        catalog_refusal=reading.catalog_refusal,
        secret_problems=reading.secrets.problems,
        missing_secrets=reading.secrets.missing,
        cuts=spec_cut_support(sync.spec.table.catalog_or_default) if sync and sync.spec.table.is_template else None,
        debezium_changes=bool(sync and sync.spec.changes and sync.spec.changes.format == "debezium"),
    )


def act(context: OperatorContext, body: Mapping[str, Any], sync: IcebergSync | None, decision: Decision) -> None:
    """Carry out a decision: create first, then delete, then tell (events), then record (status).

    Creating before recording makes a crash in between harmless: the next reconcile adopts the
    application it finds for the current generation instead of launching another.
    """
    metadata = body["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]
    if decision.launch is not None:
        assert sync is not None, "a launch needs a valid spec"
        launch(context.api, body, sync, decision.launch.version, context.settings)
        metrics.LAUNCHES.labels(decision.launch.reason).inc()
    delete_applications(context.api, namespace, name, decision.delete)
    for event in decision.events:
        log.log(logging.WARNING if event.type == "Warning" else logging.INFO, "%s/%s %s: %s", namespace, name,
                event.reason, event.message)
        context.api.post_event(body, event.type, event.reason, event.message)
    for reason in decision.failure_reasons:
        metrics.FAILURES.labels(reason).inc()
    status = decision.status
    context.api.patch_sync_status(namespace, name, status.model_dump(by_alias=True, mode="json"))
    if status.seconds_since_last_commit is not None:
        metrics.SECONDS_SINCE_COMMIT.labels(namespace, name).set(status.seconds_since_last_commit)
    if status.sink_version is not None:
        metrics.SINK_VERSION.labels(namespace, name).set(status.sink_version)
    unreachable = any(condition.reason in CATALOG_UNREACHABLE_REASONS for condition in status.conditions)
    metrics.CATALOG_UNREACHABLE.labels(namespace, name).set(1 if unreachable else 0)


async def read_table(context: OperatorContext, reading: Reading) -> TableObservation:
    """The table's view, read in a thread of its own within the catalog deadline (nothing when not readable)."""
    sync, scope = reading.sync, reading.scope
    if sync is None or scope is None or not reading.table_readable:
        return TableObservation()
    key = (sync.metadata.namespace, sync.metadata.name)
    reach = CatalogReach(context.settings, scope, context.catalog_reads.memory)
    return await context.catalog_reads.read(key, sync.spec.table.catalog_or_default.uri,
                                            lambda: observe_table(context.api, sync, reach))


async def reconcile_sync(context: OperatorContext, namespace: str, name: str) -> Decision | None:
    """Observe, decide and act for one sync; None when it is gone or being deleted."""
    async with context.lock(namespace, name):
        with context.watch.track(namespace, name):
            try:
                body = await asyncio.to_thread(context.api.get_sync, namespace, name)
                if body is None or body["metadata"].get("deletionTimestamp"):
                    return None
                reading = await asyncio.to_thread(read_spec, context, body)
                table = await read_table(context, reading)
                observation = await asyncio.to_thread(observe, context, reading, table, datetime.now(UTC))
                decision = decide(observation, context.settings)
                await asyncio.to_thread(act, context, body, reading.sync, decision)
            except Exception:
                metrics.RECONCILES.labels("error").inc()
                raise
            metrics.RECONCILES.labels("ok").inc()
            return decision


async def finalize_sync(context: OperatorContext, namespace: str, name: str) -> list[str]:
    """Delete every application of a sync being deleted; the table and its data stay."""
    async with context.lock(namespace, name):
        deleted = await asyncio.to_thread(delete_everything, context.api, namespace, name)
        metrics.forget_sync(namespace, name)
        context.catalog_reads.forget((namespace, name))
        log.info("%s/%s deleted: removed applications %s; the table is kept", namespace, name, deleted or "none")
        return deleted
