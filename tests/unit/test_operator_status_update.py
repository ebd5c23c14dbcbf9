"""The operator's pure decision and status: launches, upgrades, suspend/resume, backoff, fencing, conditions."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from icebergsync_operator.applications import ObservedApplication
from icebergsync_operator.reconcile import Decision, Observation, decide
from icebergsync_operator.settings import OperatorSettings
from icebergsync_operator.status_update import (
    TableObservation,
    conditions,
    lag_text,
    parse_status,
    with_table,
)

from icebergsync.resource_status import SyncStatus
from icebergsync.sink_state import SinkState
from icebergsync.spec import Source

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
SETTINGS = OperatorSettings(backoff_base=10, backoff_cap=80, stall_after_failures=3, stall_threshold=60)


def app(version: int, state: str = "RUNNING", error: str = "", generation: int = 1,
        age: float = 10.0) -> ObservedApplication:
    return ObservedApplication(name=f"trips-v{version}", version=version, generation=generation, state=state,
                               error_message=error, created_at=NOW - timedelta(seconds=age))


def sink(version: int | None = 1, written_by: int | None = 1, age: float = 5.0, **overrides: Any) -> SinkState:
    fields: dict[str, Any] = dict(
        sink_id="data/trips", table="db.trips", sink_version=version, snapshot_id=42,
        committed_at=(NOW - timedelta(seconds=age)).isoformat(), seconds_since_commit=age, kind="data",
        frontier={"next": 2000}, records_added=1000, dead_letters_added=0, written_by_version=written_by,
        max_event_time=None, source_lag={"records": 1200}, total_records=2000, resumed_from="checkpoint",
        foreign_snapshots_on_top=0,
    )
    fields.update(overrides)
    return SinkState(**fields)


def running_status(version: int = 1, generation: int = 1, **updates: Any) -> SyncStatus:
    return SyncStatus(phase="Running", sink_version=version, application=f"trips-v{version}",
                      observed_generation=generation).model_copy(update=updates)


def observe(previous: SyncStatus | None = None, applications: tuple[ObservedApplication, ...] = (),
            table: TableObservation | None = None, **overrides: Any) -> Observation:
    observation = Observation(
        name="trips", namespace="data", generation=1, sink_id="data/trips", table_name="db.trips",
        suspend=False, commit_interval=1.0, spec_problems=(), previous=previous or SyncStatus(),
        applications=applications, table=table or TableObservation(), now=NOW,
    )
    return replace(observation, **overrides)


def cond(decision: Decision, kind: str) -> tuple[str, str]:
    found = next(item for item in decision.status.conditions if item.type == kind)
    return found.status, found.reason


def reasons(decision: Decision) -> list[str]:
    return [event.reason for event in decision.events]


def then(decision: Decision, observation: Observation, **overrides: Any) -> Observation:
    """The next observation: the decision's status becomes the previous status."""
    return replace(observation, previous=decision.status, **overrides)


# --- launching -----------------------------------------------------------------------------


def test_first_launch_is_version_one() -> None:
    decision = decide(observe(), SETTINGS)
    assert decision.launch is not None and (decision.launch.version, decision.launch.reason) == (1, "Launched")
    assert decision.status.sink_version == 1
    assert decision.status.application == "trips-v1"
    assert decision.status.observed_generation == 1
    assert decision.status.phase == "Pending"
    assert cond(decision, "Reconciling") == ("True", "Launching")
    assert cond(decision, "Ready") == ("False", "Launching")
    assert cond(decision, "Stalled") == ("False", "AsExpected")
    assert reasons(decision) == ["Launched"]


def test_launch_version_is_above_what_the_table_has_seen_even_without_status() -> None:
    decision = decide(observe(table=TableObservation(sink=sink(version=7, written_by=7))), SETTINGS)
    assert decision.launch is not None and decision.launch.version == 8


def test_launch_version_is_above_every_application_even_a_stale_one() -> None:
    stale = app(5, generation=0)
    decision = decide(observe(previous=running_status(version=2, generation=0), applications=(stale,)), SETTINGS)
    assert decision.launch is not None and decision.launch.version == 6
    assert decision.delete == ("trips-v5",)


def test_running_job_with_a_recent_commit_of_its_version_is_ready_and_nothing_is_launched() -> None:
    observation = observe(previous=running_status(), applications=(app(1),),
                          table=TableObservation(sink=sink()))
    decision = decide(observation, SETTINGS)
    assert decision.launch is None and decision.delete == () and decision.events == ()
    assert decision.status.phase == "Running"
    assert cond(decision, "Ready") == ("True", "Committing")
    assert cond(decision, "Reconciling") == ("False", "Reconciled")
    assert decision.status.last_commit is not None
    assert decision.status.last_commit.snapshot_id == 42
    assert decision.status.last_commit.frontier == '{"next":2000}'
    assert decision.status.last_commit.sink_version == 1
    assert decision.status.lag == "1200 records"
    assert decision.status.seconds_since_last_commit == 5.0


def test_repeated_reconciles_of_a_steady_sync_do_nothing_and_keep_transition_times() -> None:
    observation = observe(previous=running_status(), applications=(app(1),), table=TableObservation(sink=sink()))
    first = decide(observation, SETTINGS)
    later = decide(then(first, observation, now=NOW + timedelta(minutes=5)), SETTINGS)
    assert later.launch is None and later.events == ()
    assert [c.last_transition_time for c in later.status.conditions] == [
        c.last_transition_time for c in first.status.conditions]


def test_job_without_a_commit_of_its_own_version_is_not_ready_yet() -> None:
    observation = observe(previous=running_status(version=2), applications=(app(2),),
                          table=TableObservation(sink=sink(version=2, written_by=1)))
    decision = decide(observation, SETTINGS)
    assert decision.status.phase == "Running"
    assert cond(decision, "Ready") == ("False", "WaitingForFirstCommit")
    assert cond(decision, "Reconciling") == ("True", "WaitingForFirstCommit")


def test_silent_job_is_degraded() -> None:
    observation = observe(previous=running_status(), applications=(app(1, age=600),),
                          table=TableObservation(sink=sink(age=400)))
    decision = decide(observation, SETTINGS)
    assert decision.status.phase == "Degraded"
    assert cond(decision, "Ready") == ("False", "NoRecentCommit")
    never = decide(replace(observation, table=TableObservation()), SETTINGS)
    assert cond(never, "Ready") == ("False", "NoRecentCommit")


def test_starting_application_is_pending() -> None:
    decision = decide(observe(previous=running_status(), applications=(app(1, state="SUBMITTED"),)), SETTINGS)
    assert decision.status.phase == "Pending"
    assert cond(decision, "Ready") == ("False", "Starting")
    assert cond(decision, "Reconciling") == ("True", "Starting")


def test_unreachable_catalog_is_a_condition_with_its_reason_and_keeps_the_last_commit() -> None:
    known = with_table(running_status(), TableObservation(sink=sink()))
    observation = observe(previous=known, applications=(app(1),),
                          table=TableObservation(error="catalog 'icebergsync' at http://rest is unreachable"))
    decision = decide(observation, SETTINGS)
    assert decision.status.phase == "Degraded"
    assert cond(decision, "Ready") == ("False", "CatalogUnreachable")
    assert reasons(decision) == ["CatalogUnreachable"]
    assert decision.status.last_commit == known.last_commit
    assert decide(then(decision, observation), SETTINGS).events == ()


# --- upgrades, suspend, resume -----------------------------------------------------------


def test_spec_change_launches_a_higher_version_and_deletes_the_old_application() -> None:
    observation = observe(previous=running_status(version=3), applications=(app(3),), generation=2,
                          table=TableObservation(sink=sink(version=3, written_by=3)))
    decision = decide(observation, SETTINGS)
    assert decision.launch is not None and (decision.launch.version, decision.launch.reason) == (4, "Upgraded")
    assert decision.delete == ("trips-v3",)
    assert decision.status.observed_generation == 2
    assert cond(decision, "Reconciling") == ("True", "Upgrading")
    assert reasons(decision) == ["Upgraded"]


def test_suspend_deletes_applications_once_and_keeps_the_version() -> None:
    observation = observe(previous=running_status(version=3), applications=(app(3),), generation=2, suspend=True)
    decision = decide(observation, SETTINGS)
    assert decision.launch is None
    assert decision.delete == ("trips-v3",)
    assert decision.status.phase == "Suspended"
    assert decision.status.sink_version == 3
    assert decision.status.application is None
    assert cond(decision, "Ready") == ("False", "Suspended")
    assert reasons(decision) == ["Suspended"]
    again = decide(then(decision, observation, applications=()), SETTINGS)
    assert again.events == () and again.delete == () and again.launch is None


def test_resume_launches_a_new_version() -> None:
    suspended = SyncStatus(phase="Suspended", sink_version=3, observed_generation=2)
    decision = decide(observe(previous=suspended, generation=3), SETTINGS)
    assert decision.launch is not None and (decision.launch.version, decision.launch.reason) == (4, "Resumed")
    assert cond(decision, "Reconciling") == ("True", "Resuming")


# --- failures ------------------------------------------------------------------------------


FAILED = "driver container failed with ExitCode: 1, Reason: Error"


def test_failed_application_is_relaunched_as_a_new_version_after_a_backoff() -> None:
    observation = observe(previous=running_status(version=2), applications=(app(2, "FAILED", FAILED),))
    failed = decide(observation, SETTINGS)
    assert failed.launch is None
    assert reasons(failed) == ["Failed"]
    assert failed.status.consecutive_failures == 1
    assert failed.status.next_retry_at == "2026-05-01T12:00:10Z"
    assert failed.status.phase == "Degraded"
    assert cond(failed, "Reconciling") == ("True", "WaitingToRetry")
    assert cond(failed, "Ready") == ("False", "JobFailed")
    assert failed.delete == ()

    waiting = decide(then(failed, observation, now=NOW + timedelta(seconds=9)), SETTINGS)
    assert waiting.launch is None and waiting.events == ()
    assert waiting.status.consecutive_failures == 1

    relaunch = decide(then(waiting, observation, now=NOW + timedelta(seconds=10)), SETTINGS)
    assert relaunch.launch is not None and (relaunch.launch.version, relaunch.launch.reason) == (3, "Relaunched")
    assert relaunch.delete == ("trips-v2",)
    assert relaunch.status.restarts == 1
    assert relaunch.status.next_retry_at is None
    assert relaunch.status.consecutive_failures == 1


def test_backoff_doubles_per_consecutive_failure() -> None:
    previous = running_status(version=4, consecutive_failures=2, restarts=2)
    decision = decide(observe(previous=previous, applications=(app(4, "SUBMISSION_FAILED", "spark-submit"),)),
                      SETTINGS)
    assert decision.status.consecutive_failures == 3
    assert decision.status.next_retry_at == "2026-05-01T12:00:40Z"


def test_consecutive_failures_stall_the_sync_but_relaunches_go_on() -> None:
    previous = running_status(version=4, consecutive_failures=2, restarts=2)
    observation = observe(previous=previous, applications=(app(4, "FAILED", FAILED),))
    stalled = decide(observation, SETTINGS)
    assert reasons(stalled) == ["Failed", "Stalled"]
    assert stalled.status.phase == "Failed"
    assert cond(stalled, "Stalled") == ("True", "TooManyFailures")
    relaunch = decide(then(stalled, observation, now=NOW + timedelta(minutes=5)), SETTINGS)
    assert relaunch.launch is not None and relaunch.launch.version == 5
    assert cond(relaunch, "Stalled") == ("True", "TooManyFailures")


def test_capped_backoff() -> None:
    previous = running_status(version=9, consecutive_failures=8)
    decision = decide(observe(previous=previous, applications=(app(9, "FAILED", FAILED),)), SETTINGS)
    assert decision.status.next_retry_at == "2026-05-01T12:01:20Z"


def test_a_healthy_commit_resets_consecutive_failures() -> None:
    previous = running_status(version=5, consecutive_failures=4, restarts=4)
    decision = decide(observe(previous=previous, applications=(app(5),),
                              table=TableObservation(sink=sink(version=5, written_by=5))), SETTINGS)
    assert decision.status.consecutive_failures == 0
    assert decision.status.restarts == 4
    assert cond(decision, "Stalled") == ("False", "AsExpected")


def test_vanished_application_counts_as_a_failure() -> None:
    decision = decide(observe(previous=running_status(version=2)), SETTINGS)
    assert reasons(decision) == ["Failed"]
    assert "disappeared" in decision.events[0].message
    assert decision.status.consecutive_failures == 1


def test_fenced_current_version_is_stalled_and_never_relaunched() -> None:
    fenced = app(2, "FAILED", "driver container failed with ExitCode: 75, Reason: Error")
    observation = observe(previous=running_status(version=2), applications=(fenced,),
                          table=TableObservation(sink=sink(version=9, written_by=9)))
    decision = decide(observation, SETTINGS)
    assert decision.launch is None
    assert decision.status.phase == "Failed"
    assert cond(decision, "Stalled") == ("True", "Fenced")
    assert cond(decision, "Ready") == ("False", "Fenced")
    assert reasons(decision) == ["Fenced"]
    assert "version 9" in decision.events[0].message
    later = decide(then(decision, observation, now=NOW + timedelta(hours=1)), SETTINGS)
    assert later.launch is None and later.events == ()


def test_completed_bounded_source_is_terminal_and_ready() -> None:
    observation = observe(previous=running_status(), applications=(app(1, "COMPLETED"),),
                          table=TableObservation(sink=sink(age=3600)), source_bounded=True, source_exhausted=True)
    decision = decide(observation, SETTINGS)
    assert decision.launch is None
    assert decision.status.phase == "Completed"
    assert cond(decision, "Ready") == ("True", "Completed")
    assert reasons(decision) == ["Completed"]
    assert decide(then(decision, observation), SETTINGS).events == ()


def test_clean_exit_of_an_unbounded_source_is_relaunched_not_completed() -> None:
    observation = observe(previous=running_status(), applications=(app(1, "COMPLETED"),),
                          table=TableObservation(sink=sink(age=3600)), source_bounded=False)
    exited = decide(observation, SETTINGS)
    assert exited.status.phase != "Completed"
    assert cond(exited, "Ready") == ("False", "JobFailed")
    assert reasons(exited) == ["Failed"]
    assert "unbounded" in exited.events[0].message
    relaunch = decide(then(exited, observation, now=NOW + timedelta(seconds=10)), SETTINGS)
    assert relaunch.launch is not None and (relaunch.launch.version, relaunch.launch.reason) == (2, "Relaunched")
    assert relaunch.delete == ("trips-v1",)


def test_clean_exit_of_a_bounded_source_short_of_its_end_is_relaunched() -> None:
    observation = observe(previous=running_status(), applications=(app(1, "COMPLETED"),),
                          table=TableObservation(sink=sink()), source_bounded=True, source_exhausted=False)
    exited = decide(observation, SETTINGS)
    assert exited.status.phase == "Degraded"
    assert "short of the source's end" in exited.events[0].message
    relaunch = decide(then(exited, observation, now=NOW + timedelta(seconds=10)), SETTINGS)
    assert relaunch.launch is not None and relaunch.launch.reason == "Relaunched"


def test_source_boundedness_and_exhaustion_from_the_spec() -> None:
    generator = Source.model_validate({"generator": {"totalRows": 2000}})
    endless = Source.model_validate({"generator": {}})
    files = Source.model_validate({"files": {"path": "/data"}})
    assert generator.bounded and not endless.bounded and not files.bounded
    assert generator.exhausted({"next_id": 2000}) and not generator.exhausted({"next_id": 1999})
    assert not generator.exhausted(None) and not generator.exhausted({"files": ["a"]})
    assert not endless.exhausted({"next_id": 10**9}) and not files.exhausted({"next_id": 10**9})


BAD_INPUT = "driver container failed with ExitCode: 65, Reason: Error"


def test_bad_input_exit_stalls_with_its_reason_and_is_not_relaunched() -> None:
    observation = observe(previous=running_status(version=2), applications=(app(2, "FAILED", BAD_INPUT),))
    decision = decide(observation, SETTINGS)
    assert decision.launch is None
    assert decision.status.phase == "Failed"
    assert cond(decision, "Stalled") == ("True", "BadInput")
    assert cond(decision, "Ready") == ("False", "BadInput")
    assert reasons(decision) == ["BadInput"]
    assert "deadLetter" in decision.events[0].message
    later = decide(then(decision, observation, now=NOW + timedelta(hours=1)), SETTINGS)
    assert later.launch is None and later.events == ()
    fixed = decide(then(later, observation, generation=2), SETTINGS)
    assert fixed.launch is not None and (fixed.launch.version, fixed.launch.reason) == (3, "Upgraded")


def test_progress_conflict_exit_stalls_with_its_reason_and_is_not_relaunched() -> None:
    failed = app(2, "FAILED", "driver container failed with ExitCode: 5, Reason: Error")
    decision = decide(observe(previous=running_status(version=2), applications=(failed,)), SETTINGS)
    assert decision.launch is None and decision.status.phase == "Failed"
    assert cond(decision, "Stalled") == ("True", "ProgressConflict")
    assert reasons(decision) == ["ProgressConflict"]
    assert "rolled back" in decision.events[0].message and "nothing was written" in decision.events[0].message


def test_incompatible_schema_exit_stalls_with_its_reason_and_is_not_relaunched() -> None:
    failed = app(2, "FAILED", "driver container failed with ExitCode: 3, Reason: Error")
    decision = decide(observe(previous=running_status(version=2), applications=(failed,)), SETTINGS)
    assert decision.launch is None and decision.status.phase == "Failed"
    assert cond(decision, "Stalled") == ("True", "IncompatibleSchema")
    assert reasons(decision) == ["IncompatibleSchema"]
    assert "names the table and each column" in decision.events[0].message


def test_a_spec_the_policy_refuses_is_stalled_never_launched_and_the_running_app_is_kept() -> None:
    problems = ("spec.spark.serviceAccount: 'cluster-admin' is not allowed (allowed: spark)",)
    observation = observe(previous=running_status(), applications=(app(1),), generation=2, policy_problems=problems)
    decision = decide(observation, SETTINGS)
    assert decision.launch is None and decision.delete == ()
    assert decision.status.phase == "Failed"
    assert cond(decision, "Stalled") == ("True", "PolicyViolation")
    assert cond(decision, "Ready") == ("False", "PolicyViolation")
    assert reasons(decision) == ["PolicyViolation"]
    assert "cluster-admin" in decision.events[0].message
    assert decide(then(decision, observation), SETTINGS).events == ()
    allowed = decide(then(decision, observation, generation=3, policy_problems=()), SETTINGS)
    assert allowed.launch is not None and (allowed.launch.version, allowed.launch.reason) == (2, "Upgraded")


def test_a_table_another_sink_writes_is_refused_before_any_launch_and_checked_again() -> None:
    taken = TableObservation(sink=sink(version=None, written_by=None, other_sink="team-b/trips"))
    observation = observe(table=taken)
    refused = decide(observation, SETTINGS)
    assert refused.launch is None and refused.status.phase == "Failed"
    assert cond(refused, "Stalled") == ("True", "TableInUse") and cond(refused, "Ready") == ("False", "TableInUse")
    assert reasons(refused) == ["TableInUse"]
    assert "written by sink team-b/trips, not data/trips" in refused.events[0].message
    again = decide(then(refused, observation), SETTINGS)
    assert again.launch is None and again.events == ()  # one event, however long it lasts
    free = decide(then(again, observation, table=TableObservation()), SETTINGS)
    assert free.launch is not None and (free.launch.version, free.launch.reason) == (1, "Launched")


def test_an_upgrade_into_a_table_another_sink_took_over_is_refused_and_the_running_app_kept() -> None:
    taken = TableObservation(sink=sink(other_sink="data/rogue"))
    observation = observe(previous=running_status(), applications=(app(1),), generation=2, table=taken)
    refused = decide(observation, SETTINGS)
    assert refused.launch is None and refused.delete == ()
    assert reasons(refused) == ["TableInUse"] and refused.status.observed_generation == 1
    upgraded = decide(then(refused, observation, table=TableObservation(sink=sink())), SETTINGS)
    assert upgraded.launch is not None and (upgraded.launch.version, upgraded.launch.reason) == (2, "Upgraded")


UNREACHABLE = TableObservation(error="catalog 'icebergsync' at http://rest is unreachable")


def test_no_first_launch_while_the_catalog_is_unreachable() -> None:
    observation = observe(table=UNREACHABLE)
    waiting = decide(observation, SETTINGS)
    assert waiting.launch is None
    assert waiting.status.sink_version is None
    assert cond(waiting, "Reconciling") == ("True", "WaitingForCatalog")
    assert cond(waiting, "Ready") == ("False", "WaitingForCatalog")
    assert reasons(waiting) == ["WaitingForCatalog"]
    again = decide(then(waiting, observation), SETTINGS)
    assert again.launch is None and again.events == ()
    answered = decide(then(again, observation, table=TableObservation(sink=sink(version=7, written_by=7))), SETTINGS)
    assert answered.launch is not None and (answered.launch.version, answered.launch.reason) == (8, "Launched")


def test_no_relaunch_or_upgrade_with_a_guessed_version_while_the_catalog_is_unreachable() -> None:
    failed = observe(previous=running_status(version=2, next_retry_at="2026-05-01T11:59:00Z", consecutive_failures=1),
                     applications=(app(2, "FAILED", FAILED),), table=UNREACHABLE)
    waiting = decide(failed, SETTINGS)
    assert waiting.launch is None and waiting.delete == ()
    assert cond(waiting, "Reconciling") == ("True", "WaitingForCatalog")

    upgrade = observe(previous=running_status(version=3), applications=(app(3),), generation=2, table=UNREACHABLE)
    held = decide(upgrade, SETTINGS)
    assert held.launch is None and held.delete == ()
    assert held.status.observed_generation == 1
    resumed = decide(then(held, upgrade, table=TableObservation(sink=sink(version=3, written_by=3))), SETTINGS)
    assert resumed.launch is not None and (resumed.launch.version, resumed.launch.reason) == (4, "Upgraded")


# --- invalid specs, adoption ---------------------------------------------------------------


def test_invalid_spec_is_stalled_and_leaves_the_running_application_alone() -> None:
    problems = ("spec.table.partitionBy[0]: column 'nope' is not in the schema",)
    observation = observe(previous=running_status(), applications=(app(1),), generation=2, spec_problems=problems)
    decision = decide(observation, SETTINGS)
    assert decision.launch is None and decision.delete == ()
    assert decision.status.phase == "Failed"
    assert cond(decision, "Stalled") == ("True", "InvalidSpec")
    assert reasons(decision) == ["InvalidSpec"]
    assert problems[0] in decision.events[0].message
    assert decision.status.observed_generation == 2
    assert decide(then(decision, observation), SETTINGS).events == ()


def test_application_launched_before_a_lost_status_write_is_adopted_not_duplicated() -> None:
    observation = observe(previous=running_status(version=1), applications=(app(1), app(2, "SUBMITTED",
                                                                                    generation=2)),
                          generation=2)
    decision = decide(observation, SETTINGS)
    assert decision.launch is None
    assert decision.status.sink_version == 2
    assert decision.status.application == "trips-v2"
    assert decision.delete == ("trips-v1",)


def test_first_launch_lost_status_is_adopted() -> None:
    decision = decide(observe(applications=(app(1, "SUBMITTED"),)), SETTINGS)
    assert decision.launch is None
    assert decision.status.sink_version == 1


# --- status helpers ------------------------------------------------------------------------


def test_condition_transition_time_moves_only_when_status_changes() -> None:
    from icebergsync_operator.status_update import Assessment, Verdict

    ready = Assessment("Running", Verdict("True", "Committing"), Verdict("False", "Reconciled"),
                       Verdict("False", "AsExpected"))
    first = SyncStatus(conditions=conditions(SyncStatus(), ready, 1, NOW))
    degraded = Assessment("Degraded", Verdict("False", "NoRecentCommit"), Verdict("False", "NoRecentCommit"),
                          Verdict("False", "AsExpected"))
    second = conditions(first, degraded, 1, NOW + timedelta(minutes=1))
    by_type = {item.type: item for item in second}
    assert by_type["Ready"].last_transition_time == "2026-05-01T12:01:00Z"
    assert by_type["Reconciling"].last_transition_time == "2026-05-01T12:00:00Z"


def test_parse_status_ignores_foreign_fields_and_survives_garbage() -> None:
    assert parse_status({"phase": "Running", "sinkVersion": 3, "kopf": {"x": 1}}).sink_version == 3
    assert parse_status({"phase": "Exploded"}) == SyncStatus()
    assert parse_status(None) == SyncStatus()


def test_lag_text() -> None:
    assert lag_text({"records": 5}) == "5 records"
    # A Kafka lag's per-partition detail stays out of the LAG column (it was printed as a dict)
    assert lag_text({"records": 5, "partitions": {"orders": {"0": 2, "1": 3}}}) == "5 records"
    assert lag_text({"files": 2, "records": 5}) == "2 files, 5 records"
    assert lag_text(None) is None
