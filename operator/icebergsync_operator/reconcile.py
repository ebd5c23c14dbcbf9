"""The decision at the heart of the operator (pure): from what was observed, what to do and what to report.

``decide`` takes one ``Observation`` of a sync (its spec, the status it last wrote, its
SparkApplications and what the table says) and returns a ``Decision``: at most one launch, the
applications to delete, the events to post and the new status. The side effects live in
``lifecycle``; everything here is a function of its arguments, so every rule is unit-tested.

Versions: every launch gets ``1 + max(status version, any application's version, the table's
highest version)``, so a version is never reused, even if the status was lost. An application
created for the current generation whose status write was lost is adopted, never duplicated.
No launch happens while the catalog cannot be read: the table's highest version is unknown then,
and a guessed version would be fenced (or fence a running writer it did not know of).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from icebergsync.errors import TableInUseError
from icebergsync.resource_status import SyncStatus
from icebergsync.sink_state import SinkState
from icebergsync.table_routing import is_template
from icebergsync.tables.cuts import CutSupport
from icebergsync.tables.status import is_lagging
from icebergsync_operator.applications import ObservedApplication, Outcome
from icebergsync_operator.catalogs.resolve import CatalogRefusal
from icebergsync_operator.render import application_name
from icebergsync_operator.settings import OperatorSettings
from icebergsync_operator.status_update import (
    FALSE,
    TRUE,
    Assessment,
    TableObservation,
    Verdict,
    condition,
    conditions,
    format_time,
    parse_time,
    source_settings,
    with_table,
)

NORMAL = "Normal"
WARNING = "Warning"

# Why a launch happens -> the Reconciling reason while it starts.
LAUNCH_REASONS = {"Launched": "Launching", "Upgraded": "Upgrading", "Resumed": "Resuming", "Relaunched": "Relaunching"}


@dataclass(frozen=True)
class Observation:
    """Everything ``decide`` looks at, read fresh at the start of a reconcile."""

    name: str
    namespace: str
    generation: int
    sink_id: str
    table_name: str
    suspend: bool
    commit_interval: float  #: seconds
    spec_problems: tuple[str, ...]  #: empty when the spec is valid
    previous: SyncStatus
    applications: tuple[ObservedApplication, ...]
    table: TableObservation
    now: datetime
    source_bounded: bool = False  #: the source ends (generator totalRows); others run until stopped
    source_exhausted: bool = False  #: the table's committed frontier is the bounded source's end
    policy_problems: tuple[str, ...] = ()  #: what the operator's policy refuses in a valid spec
    catalog_refusal: CatalogRefusal | None = None  #: why a valid spec may not use its catalog
    secret_problems: tuple[str, ...] = ()  #: Secrets named by an allowed spec that a job may not mount
    missing_secrets: tuple[str, ...] = ()  #: Secrets named by the spec that do not exist (yet)
    cuts: CutSupport | None = None  #: a sync of many tables: whether its catalog commits its cuts atomically
    debezium_changes: bool = False  #: the sync reads Debezium change events (its SourceSettings condition)

    @property
    def tables_text(self) -> str:
        """``table <name>``, or for a template ``the tables of <template>``."""
        return f"the tables of {self.table_name}" if is_template(self.table_name) else f"table {self.table_name}"


@dataclass(frozen=True)
class Launch:
    version: int
    reason: str  #: Launched, Upgraded, Resumed or Relaunched


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    status: SyncStatus
    launch: Launch | None = None
    delete: tuple[str, ...] = ()
    events: tuple[Event, ...] = field(default_factory=tuple)

    @property
    def failure_reasons(self) -> list[str]:
        """Failures newly observed in this decision (for metrics)."""
        return [event.reason for event in self.events if event.reason in ("Failed", "Fenced")]


OK_STALLED = Verdict(FALSE, "AsExpected")


def decide(observation: Observation, settings: OperatorSettings) -> Decision:
    """What to do next for one sync."""
    previous = _adopt_orphan(observation)
    if observation.spec_problems:
        return _refused(observation, previous, "InvalidSpec", observation.spec_problems, "the spec is invalid")
    if observation.catalog_refusal is not None:
        refusal = observation.catalog_refusal
        return _refused(observation, previous, refusal.reason, (refusal.message,), "the sync's catalog cannot be used")
    if observation.policy_problems:
        return _refused(observation, previous, "PolicyViolation", observation.policy_problems,
                        "the operator's policy refuses the spec")
    if observation.secret_problems:
        return _refused(observation, previous, "SecretRefused", observation.secret_problems,
                        "a Secret the spec names may not be mounted")
    if observation.suspend:
        return _suspend(observation, previous)
    reason = _launch_reason(observation, previous)
    if reason:
        return _launch(observation, previous, reason, settings)
    current = _current(observation, previous)
    if current is None or current.outcome is Outcome.FAILED:
        return _failed(observation, previous, current, settings)
    if current.outcome is Outcome.FENCED:
        return _fenced(observation, previous, current)
    if current.outcome in _STALLING_EXITS:
        return _stalled_by_exit(observation, previous, current)
    if current.outcome is Outcome.COMPLETED:
        if observation.source_bounded and observation.source_exhausted:
            return _completed(observation, previous, current)
        return _failed(observation, previous, current, settings, _early_exit(observation, current))
    return _active(observation, previous, current, settings)


def _early_exit(observation: Observation, current: ObservedApplication) -> str:
    """Why a clean exit is not completion: the source never ends, or the table has not reached its end."""
    if not observation.source_bounded:
        return f"{current.describe()}, but its source is unbounded: a clean exit is not completion"
    if observation.table.error is not None:
        return f"{current.describe()}, but the table cannot be read to confirm the source is fully committed"
    return f"{current.describe()}, but the table's frontier is short of the source's end"


def next_version(observation: Observation, previous: SyncStatus) -> int:
    """A version above every one this sink ever used: in status, in applications, in the table."""
    known = [previous.sink_version or 0, *(app.version for app in observation.applications)]
    if observation.table.highest_version is not None:
        known.append(observation.table.highest_version)
    return max(known) + 1


def _adopt_orphan(observation: Observation) -> SyncStatus:
    """Take over an application launched for this generation whose status write was lost."""
    previous = observation.previous
    orphans = [app for app in observation.applications
               if app.version > (previous.sink_version or 0) and app.generation == observation.generation]
    if not orphans:
        return previous
    newest = max(orphans, key=lambda app: app.version)
    return previous.model_copy(update={"sink_version": newest.version, "application": newest.name,
                                       "observed_generation": observation.generation})


def _current(observation: Observation, previous: SyncStatus) -> ObservedApplication | None:
    return next((app for app in observation.applications if app.name == previous.application), None)


def _launch_reason(observation: Observation, previous: SyncStatus) -> str | None:
    if previous.sink_version is None:
        return "Launched"
    if previous.observed_generation != observation.generation or previous.phase == "Suspended":
        return "Resumed" if previous.phase == "Suspended" else "Upgraded"
    return None


def _others(observation: Observation, keep: str | None) -> tuple[str, ...]:
    return tuple(sorted(app.name for app in observation.applications if app.name != keep))


def _finish(observation: Observation, previous: SyncStatus, assessment: Assessment, *,
            launch: Launch | None = None, delete: tuple[str, ...] = (), events: tuple[Event, ...] = (),
            **updates: object) -> Decision:
    """Assemble the decision: the status carries the assessment, table facts and ``updates``; a Warning event
    when SourceSettings turns False (or changes its reason)."""
    settings = source_settings(previous, observation.table) if observation.debezium_changes else None
    before = condition(previous, "SourceSettings")
    if settings is not None and settings.status == FALSE and (
            before is None or (before.status, before.reason) != (FALSE, settings.reason)):
        events = (*events, Event(WARNING, "SourceSettings", settings.message))
    status = with_table(previous, observation.table).model_copy(update={
        "observed_generation": observation.generation,
        **updates,
        "phase": assessment.phase,
        "conditions": conditions(previous, assessment, observation.generation, observation.now, observation.cuts,
                                 settings),
    })
    return Decision(status=status, launch=launch, delete=delete, events=events)


def _stalled_by_failures(failures: int, settings: OperatorSettings) -> Verdict:
    if failures >= settings.stall_after_failures:
        return Verdict(TRUE, "TooManyFailures", f"{failures} consecutive failures; relaunching at most every "
                                                f"{settings.backoff_cap:.0f}s")
    return OK_STALLED


def _stalled(previous: SyncStatus, reason: str, message: str) -> tuple[Assessment, tuple[Event, ...]]:
    """Failed and stalled with ``reason``: the assessment, and its Warning event unless already stalled for it."""
    before = condition(previous, "Stalled")
    events = () if before is not None and before.reason == reason else (Event(WARNING, reason, message),)
    return Assessment(
        phase="Failed",
        ready=Verdict(FALSE, reason, message),
        reconciling=Verdict(FALSE, reason),
        stalled=Verdict(TRUE, reason, message),
    ), events


def _refused(observation: Observation, previous: SyncStatus, reason: str, problems: tuple[str, ...],
             summary: str) -> Decision:
    """Nothing is launched for this generation; the running application, if any, is left as is."""
    message = "; ".join(problems)
    before = condition(previous, "Stalled")
    is_new = previous.observed_generation != observation.generation or before is None or before.reason != reason
    events = (Event(WARNING, reason, message),) if is_new else ()
    assessment = Assessment(
        phase="Failed",
        ready=Verdict(FALSE, reason, f"{summary}; the running application, if any, is left as is"),
        reconciling=Verdict(FALSE, reason),
        stalled=Verdict(TRUE, reason, message),
    )
    return _finish(observation, previous, assessment, events=events)


def _suspend(observation: Observation, previous: SyncStatus) -> Decision:
    doomed = _others(observation, keep=None)
    events: tuple[Event, ...] = ()
    if previous.phase != "Suspended":
        deleted = f"; deleted {', '.join(doomed)}" if doomed else ""
        events = (Event(NORMAL, "Suspended", f"suspended at version {previous.sink_version}{deleted}"),)
    assessment = Assessment(
        phase="Suspended",
        ready=Verdict(FALSE, "Suspended", "spec.suspend is true"),
        reconciling=Verdict(FALSE, "Suspended"),
        stalled=OK_STALLED,
    )
    return _finish(observation, previous, assessment, delete=doomed, events=events,
                   application=None, next_retry_at=None, consecutive_failures=0)


def _launch(observation: Observation, previous: SyncStatus, reason: str, settings: OperatorSettings) -> Decision:
    if observation.table.error is not None:
        return _waiting_for_catalog(observation, previous, reason, settings)
    refusal = observation.table.in_use
    if refusal is not None:
        return _table_in_use(observation, previous, refusal)
    if observation.missing_secrets:
        return _waiting(observation, previous, reason, settings, "WaitingForSecret",
                        f"not launching until {', '.join(observation.missing_secrets)} exists")
    version = next_version(observation, previous)
    name = application_name(observation.name, version)
    messages = {
        "Launched": f"launched {name} (version {version})",
        "Upgraded": f"spec generation {observation.generation}: launched {name} (version {version}); "
                    f"version {previous.sink_version} is fenced and its application deleted",
        "Resumed": f"resumed with {name} (version {version}) from the table's frontier",
        "Relaunched": f"relaunched as {name} (version {version}) after {previous.consecutive_failures} "
                      f"consecutive failure(s)",
    }
    restarts = previous.restarts + (1 if reason == "Relaunched" else 0)
    assessment = Assessment(
        phase="Pending",
        ready=Verdict(FALSE, "Launching", messages[reason]),
        reconciling=Verdict(TRUE, LAUNCH_REASONS[reason], messages[reason]),
        stalled=_stalled_by_failures(previous.consecutive_failures, settings),
    )
    return _finish(observation, previous, assessment, launch=Launch(version, reason),
                   delete=_others(observation, keep=None), events=(Event(NORMAL, reason, messages[reason]),),
                   sink_version=version, application=name, next_retry_at=None, restarts=restarts)


def _waiting_for_catalog(observation: Observation, previous: SyncStatus, reason: str,
                         settings: OperatorSettings) -> Decision:
    """A launch is due but the catalog cannot be read: wait (each status refresh reads it again)."""
    assert observation.table.error is not None
    return _waiting(observation, previous, reason, settings, "WaitingForCatalog",
                    f"not launching until the catalog answers (the table's sink version is unknown): "
                    f"{observation.table.error}")


def _waiting(observation: Observation, previous: SyncStatus, reason: str, settings: OperatorSettings,
             waiting_for: str, message: str) -> Decision:
    """A launch is due but cannot happen yet (``waiting_for``, the reason): wait, checking again at each refresh."""
    before = condition(previous, "Reconciling")
    events = () if before is not None and before.reason == waiting_for else (Event(WARNING, waiting_for, message),)
    assessment = Assessment(
        phase="Pending" if previous.phase in (None, "Pending") else "Degraded",
        ready=Verdict(FALSE, waiting_for, message),
        reconciling=Verdict(TRUE, waiting_for, f"{LAUNCH_REASONS[reason]}: {message}"),
        stalled=_stalled_by_failures(previous.consecutive_failures, settings),
    )
    # observedGeneration stays: the new generation is not acted on until a version is launched for it.
    return _finish(observation, previous, assessment, events=events, observed_generation=previous.observed_generation)


def _table_in_use(observation: Observation, previous: SyncStatus, refusal: TableInUseError) -> Decision:
    """A launch is due but another sink wrote the table (one of the sync's tables) last: never launch into it
    (checked again each refresh)."""
    assessment, events = _stalled(previous, "TableInUse", f"not launching: {refusal}")
    # observedGeneration stays: the generation is not acted on until a version is launched for it.
    return _finish(observation, previous, assessment, events=events, observed_generation=previous.observed_generation)


def _failed(observation: Observation, previous: SyncStatus, current: ObservedApplication | None,
            settings: OperatorSettings, description: str | None = None) -> Decision:
    """A failed, vanished or early-exited current application: count it, wait out the backoff, then relaunch."""
    retry_at = parse_time(previous.next_retry_at)
    if retry_at is not None and observation.now >= retry_at:
        return _launch(observation, previous, "Relaunched", settings)
    description = description or (current.describe() if current else (
        f"application {previous.application} (version {previous.sink_version}) disappeared"))
    failures = previous.consecutive_failures
    events: tuple[Event, ...] = ()
    if retry_at is None:
        failures += 1
        delay = settings.retry_delay(failures)
        retry_at = observation.now + timedelta(seconds=delay)
        events = (Event(WARNING, "Failed", f"{description}; relaunching as a new version in {delay:.0f}s"),)
        if failures == settings.stall_after_failures:
            events += (Event(WARNING, "Stalled", f"{failures} consecutive failures; still relaunching, "
                                                 f"at most every {settings.backoff_cap:.0f}s"),)
    stalled = _stalled_by_failures(failures, settings)
    assessment = Assessment(
        phase="Failed" if stalled.status == TRUE else "Degraded",
        ready=Verdict(FALSE, "JobFailed", description),
        reconciling=Verdict(TRUE, "WaitingToRetry", f"relaunch at {format_time(retry_at)}"),
        stalled=stalled,
    )
    keep = current.name if current else None
    return _finish(observation, previous, assessment, delete=_others(observation, keep), events=events,
                   consecutive_failures=failures, next_retry_at=format_time(retry_at))


def _fenced(observation: Observation, previous: SyncStatus, current: ObservedApplication) -> Decision:
    """The current version was fenced: someone else writes this sink; relaunching would fight it."""
    owner = observation.table.highest_version
    message = (f"version {current.version} was fenced: {f'version {owner}' if owner else 'a newer writer'} of sink "
               f"{observation.sink_id} owns {observation.tables_text}; another IcebergSync or operator "
               f"writes with the same sink id. Not relaunching; change the spec to launch a newer version.")
    assessment, events = _stalled(previous, "Fenced", message)
    return _finish(observation, previous, assessment, delete=_others(observation, current.name), events=events)


# Exits that a relaunch would only repeat: the reason, and what a person has to do.
_STALLING_EXITS = {
    Outcome.BAD_INPUT: (
        "BadInput",
        "the source holds a record or file it cannot ingest and spec.deadLetter is not set; the driver log names "
        "it. Not relaunching: fix the input, or set spec.deadLetter (a spec change launches a new version).",
    ),
    Outcome.PROGRESS_CONFLICT: (
        "ProgressConflict",
        "the table's record of this sync cannot be resumed from (the table was rolled back past every commit of the "
        "sync, its checkpoint property is damaged, or another source's sync uses the same sink id); the driver log "
        "says which, and nothing was written. Not relaunching: restore the table or fix the sink id "
        "(docs/operations.md), then change the spec to launch a new version.",
    ),
    Outcome.INCOMPATIBLE_SCHEMA: (
        "IncompatibleSchema",
        "the table's schema cannot follow a schema change (of spec.schema, or of the source's records: a type "
        "Iceberg cannot change to, a dropped key column); the driver log names the table and each column, and "
        "nothing of that trigger was written. Not relaunching: change the table by hand or the spec "
        "(docs/connectors.md, \"Schema changes from the source\"), then change the spec to launch a new version.",
    ),
}


def _stalled_by_exit(observation: Observation, previous: SyncStatus, current: ObservedApplication) -> Decision:
    """An exit status that a relaunch would only repeat (bad input, progress conflict): stall with the reason."""
    reason, advice = _STALLING_EXITS[current.outcome]
    message = f"{current.describe()}: {advice}"
    assessment, events = _stalled(previous, reason, message)
    return _finish(observation, previous, assessment, delete=_others(observation, current.name), events=events,
                   next_retry_at=None)


def _completed(observation: Observation, previous: SyncStatus, current: ObservedApplication) -> Decision:
    """A bounded source (generator totalRows) finished: terminal until the spec changes."""
    message = f"{current.name} (version {current.version}) finished: the source is fully committed"
    events = () if previous.phase == "Completed" else (Event(NORMAL, "Completed", message),)
    assessment = Assessment(
        phase="Completed",
        ready=Verdict(TRUE, "Completed", message),
        reconciling=Verdict(FALSE, "Completed"),
        stalled=OK_STALLED,
    )
    return _finish(observation, previous, assessment, delete=_others(observation, current.name), events=events,
                   consecutive_failures=0, next_retry_at=None)


def _active(observation: Observation, previous: SyncStatus, current: ObservedApplication,
            settings: OperatorSettings) -> Decision:
    """Starting or running: Ready once the table holds a recent commit of this version."""
    table = observation.table
    sink = table.sink
    window = max(settings.stall_threshold, 3 * observation.commit_interval)
    committed = (sink is not None and sink.written_by_version == current.version
                 and sink.seconds_since_commit is not None)
    failures = 0 if committed and current.outcome is Outcome.RUNNING else previous.consecutive_failures
    stalled = _stalled_by_failures(failures, settings)
    events: tuple[Event, ...] = ()
    if current.outcome is Outcome.STARTING:
        assessment = Assessment("Pending", Verdict(FALSE, "Starting", current.describe()),
                                Verdict(TRUE, "Starting", current.describe()), stalled)
    elif table.error is not None:
        before = condition(previous, "Ready")
        if before is None or before.reason != "CatalogUnreachable":
            events = (Event(WARNING, "CatalogUnreachable", table.error),)
        assessment = Assessment("Degraded", Verdict(FALSE, "CatalogUnreachable", table.error),
                                Verdict(FALSE, "CatalogUnreachable"), stalled)
    elif committed:
        assert sink is not None and sink.seconds_since_commit is not None
        age = sink.seconds_since_commit
        if age <= window:
            assessment = Assessment("Running", Verdict(TRUE, "Committing", _committing(current, sink, table)),
                                    Verdict(FALSE, "Reconciled"), stalled)
        else:
            assessment = _silent(current, age, window, stalled)
    else:
        running_for = (observation.now - current.created_at).total_seconds() if current.created_at else 0.0
        if running_for <= window:
            waiting = f"version {current.version} is running; no commit of it yet"
            assessment = Assessment("Running", Verdict(FALSE, "WaitingForFirstCommit", waiting),
                                    Verdict(TRUE, "WaitingForFirstCommit", waiting), stalled)
        else:
            assessment = _silent(current, running_for, window, stalled)
    return _finish(observation, previous, assessment, delete=_others(observation, current.name), events=events,
                   consecutive_failures=failures, next_retry_at=None)


def _committing(current: ObservedApplication, sink: SinkState, table: TableObservation) -> str:
    """The Ready message of a committing sync (of many tables: their number, the newest commit's table, the lag)."""
    age = sink.seconds_since_commit or 0.0
    if table.lanes is None:
        return f"version {current.version} committed snapshot {sink.snapshot_id} {age:.0f}s ago"
    lanes = table.lanes
    lagging = sum(1 for state in lanes.states if is_lagging(state))
    return (f"running, {len(lanes.states)} tables ({lagging} lagging): version {current.version} committed snapshot "
            f"{sink.snapshot_id} to {sink.table} {age:.0f}s ago")


def _silent(current: ObservedApplication, seconds: float, window: float, stalled: Verdict) -> Assessment:
    message = (f"version {current.version} is running but has not committed for {seconds:.0f}s "
               f"(expected within {window:.0f}s)")
    return Assessment("Degraded", Verdict(FALSE, "NoRecentCommit", message), Verdict(FALSE, "NoRecentCommit"),
                      stalled)
