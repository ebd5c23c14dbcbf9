"""The ``status`` of an IcebergSync resource: written by the operator, validated by the same model.

The CRD's status schema is generated from ``SyncStatus`` (icebergsync.structural_schema), so what
the operator writes always fits.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

PHASES = ("Pending", "Running", "Suspended", "Degraded", "Failed", "Completed")
CONDITION_TYPES = ("Ready", "Reconciling", "Stalled")
SYNC_CONDITION_TYPES = (*CONDITION_TYPES, "AtomicCuts", "SourceSettings")

Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


class StatusModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Condition(StatusModel):
    """A kstatus-style condition."""

    type: Literal["Ready", "Reconciling", "Stalled"] = Field(description="Ready, Reconciling or Stalled.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$", description="One CamelCase word saying why.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: Timestamp = Field(description="When status last changed.")
    observed_generation: int | None = Field(default=None, description="Generation the condition is about.")


class SyncCondition(Condition):
    """A condition of an IcebergSync: kstatus's three, AtomicCuts (many tables), SourceSettings (Debezium events)."""

    type: Literal["Ready", "Reconciling", "Stalled", "AtomicCuts", "SourceSettings"] = Field(  # type: ignore[assignment]
        description="Ready, Reconciling or Stalled; AtomicCuts (a sync of many tables): whether the catalog commits "
        "the tables of one trigger atomically; SourceSettings (changes.format debezium): False (a warning) when the "
        "newest data commit of a table saw events showing a documented Debezium setting not in use, the reason "
        "naming it and the message the fix.")


class LastCommit(StatusModel):
    """The newest snapshot this sink committed, as the table records it."""

    snapshot_id: int = Field(description="Iceberg snapshot id.")
    committed_at: Timestamp = Field(description="Snapshot timestamp.")
    frontier: str | None = Field(default=None, description="Source position covered, as canonical JSON.")
    records_added: int | None = Field(default=None, description="Records the snapshot added.")
    sink_version: int | None = Field(default=None, description="Sink version that wrote the snapshot.")


class TableStatus(StatusModel):
    """One table of a sync of many tables: its newest commit by the sink, as the table records it."""

    table: str = Field(description="namespace.table.")
    snapshot_id: int | None = Field(default=None, description="Newest snapshot of the sink on the table's main.")
    committed_at: Timestamp | None = Field(default=None, description="That snapshot's timestamp.")
    seconds_since_commit: float | None = Field(default=None, description="Age of that snapshot when observed.")
    sink_version: int | None = Field(default=None, description="Sink version that wrote that snapshot.")
    frontier: str | None = Field(default=None, description="The table's frontier (its topics only) as canonical "
                                 "JSON; a long one is cut and ends with an ellipsis.")
    lag: str | None = Field(default=None, description="Source backlog of the table's topics at that commit.")
    lagging: bool = Field(default=False, description="True when that commit reported a backlog above zero.")
    problem: str | None = Field(default=None, description="Why the sink cannot go on with this table, if it cannot "
                                "(another sink wrote it since, or its record of the sink cannot be resumed from).")


class TablesStatus(StatusModel):
    """A sync whose table.name is a template: its tables as the catalog shows them, bounded in size."""

    count: int = Field(default=0, description="Tables holding this sink's checkpoint (its tables).")
    lagging: int = Field(default=0, description="Tables whose newest commit reported a source backlog above zero.")
    worst_lag: str | None = Field(default=None, description="The largest backlog of one table.")
    worst_lag_table: str | None = Field(default=None, description="The table with the largest backlog.")
    newest_commit_table: str | None = Field(default=None, description="The table of the newest commit (lastCommit).")
    problems: int = Field(default=0, description="Tables with a problem (see items[].problem).")
    items: list[TableStatus] = Field(default_factory=list, description="At most 20 tables: those with a problem, "
                                     "then the worst-lagging, then the longest without a commit.")
    omitted: int = Field(default=0, description="Tables of the sink not listed in items.")
    unread: int = Field(default=0, description="Tables the template matches that were not read (past the "
                        "operator's bound on tables read per status refresh).")
    other_sinks: list[str] = Field(default_factory=list, description="At most 20 tables the template matches that "
                                   "another sink wrote last and this one never did, as table (sink id).")
    other_sink_tables: int = Field(default=0, description="How many such tables there are in all.")


class SyncStatus(StatusModel):
    """Observed state of an IcebergSync, maintained by the operator."""

    phase: Literal["Pending", "Running", "Suspended", "Degraded", "Failed", "Completed"] = Field(
        default="Pending", description="Summary: Pending, Running, Suspended, Degraded, Failed or Completed."
    )
    sink_version: int | None = Field(default=None, description="Version of the current launch (fences older ones).")
    application: str | None = Field(default=None, description="Name of the current SparkApplication.")
    observed_generation: int | None = Field(default=None, description="Spec generation the operator acted on.")
    last_commit: LastCommit | None = Field(default=None, description="Newest snapshot committed by this sink.")
    seconds_since_last_commit: float | None = Field(default=None, description="Age of lastCommit when observed.")
    lag: str | None = Field(default=None, description="Source backlog reported with the last commit.")
    restarts: int = Field(default=0, description="Relaunches after failures, over the sync's lifetime.")
    consecutive_failures: int = Field(default=0, description="Failures since the last healthy commit.")
    next_retry_at: Timestamp | None = Field(default=None, description="When a failed job is relaunched.")
    tables: TablesStatus | None = Field(default=None, description="A sync of many tables (table.name a template): "
                                        "its tables; lastCommit is then the newest commit of any of them, lag "
                                        "the sum of their backlogs.")
    conditions: list[SyncCondition] = Field(default_factory=list, description="Ready, Reconciling, Stalled; "
                                        "AtomicCuts for a sync of many tables; SourceSettings for a sync of "
                                        "Debezium change events.")
