"""What a SparkApplication's status means for its sync (pure)."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from icebergsync.errors import EXIT_BAD_INPUT, EXIT_FENCED, EXIT_INCOMPATIBLE_SCHEMA, EXIT_PROGRESS_CONFLICT
from icebergsync_operator.constants import (
    COMPLETED_STATES,
    FAILED_STATES,
    GENERATION_ANNOTATION,
    RUNNING_STATES,
    SINK_VERSION_LABEL,
)

# The Spark Operator reports a failed driver as "driver container failed with ExitCode: 75, Reason: Error".
_EXIT_CODE = re.compile(r"exit\s*code:?\s*(-?\d+)", re.IGNORECASE)


class Outcome(enum.Enum):
    """The application's lifecycle, reduced to what the operator acts on."""

    STARTING = "Starting"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    FENCED = "Fenced"
    BAD_INPUT = "BadInput"  #: exit status 65: input it cannot ingest and no dead-letter table
    PROGRESS_CONFLICT = "ProgressConflict"  #: exit status 5: the table's progress cannot be resumed from
    INCOMPATIBLE_SCHEMA = "IncompatibleSchema"  #: exit status 3: a schema change the table cannot follow


_EXIT_OUTCOMES = {
    EXIT_FENCED: Outcome.FENCED, EXIT_BAD_INPUT: Outcome.BAD_INPUT, EXIT_PROGRESS_CONFLICT: Outcome.PROGRESS_CONFLICT,
    EXIT_INCOMPATIBLE_SCHEMA: Outcome.INCOMPATIBLE_SCHEMA,
}


@dataclass(frozen=True)
class ObservedApplication:
    """One SparkApplication of a sync, as read from the API."""

    name: str
    version: int
    generation: int | None
    state: str
    error_message: str
    created_at: datetime | None

    @property
    def exit_code(self) -> int | None:
        match = _EXIT_CODE.search(self.error_message)
        return int(match.group(1)) if match else None

    @property
    def outcome(self) -> Outcome:
        if self.state in FAILED_STATES:
            return _EXIT_OUTCOMES.get(self.exit_code or 0, Outcome.FAILED)
        if self.state in COMPLETED_STATES:
            return Outcome.COMPLETED
        if self.state in RUNNING_STATES:
            return Outcome.RUNNING
        return Outcome.STARTING

    def describe(self) -> str:
        state = self.state or "not yet submitted"
        detail = f": {self.error_message}" if self.error_message else ""
        return f"application {self.name} (version {self.version}) is {state}{detail}"


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def parse_application(body: Mapping[str, Any]) -> ObservedApplication | None:
    """The observed application, or None when it carries no sink-version label (not one of ours)."""
    metadata = body.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    try:
        version = int(labels[SINK_VERSION_LABEL])
    except (KeyError, ValueError):
        return None
    generation = annotations.get(GENERATION_ANNOTATION)
    state = ((body.get("status") or {}).get("applicationState") or {})
    created = metadata.get("creationTimestamp")
    return ObservedApplication(
        name=metadata["name"],
        version=version,
        generation=int(generation) if generation and str(generation).isdigit() else None,
        state=str(state.get("state") or ""),
        error_message=str(state.get("errorMessage") or ""),
        created_at=created if isinstance(created, datetime) else _parse_time(created),
    )
