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


class LastCommit(StatusModel):
    """The newest snapshot this sink committed, as the table records it."""

    snapshot_id: int = Field(description="Iceberg snapshot id.")
    committed_at: Timestamp = Field(description="Snapshot timestamp.")
    frontier: str | None = Field(default=None, description="Source position covered, as canonical JSON.")
    records_added: int | None = Field(default=None, description="Records the snapshot added.")
    sink_version: int | None = Field(default=None, description="Sink version that wrote the snapshot.")


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
    conditions: list[Condition] = Field(default_factory=list, description="Ready, Reconciling, Stalled.")
