"""A catalog resource's next status and events (pure): the Ready condition from its last check."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from icebergsync.catalogs.model import CatalogStatus
from icebergsync.resource_status import Condition
from icebergsync_operator.status_update import TRUE, Verdict, format_time

CONNECTED = "Connected"


def parse_catalog_status(raw: Mapping[str, Any] | None) -> CatalogStatus:
    """The stored status; a corrupt one starts over."""
    try:
        return CatalogStatus.model_validate(raw or {})
    except ValidationError:
        return CatalogStatus()


def next_status(previous: CatalogStatus, ready: Verdict, generation: int, now: datetime) -> CatalogStatus:
    """The status after a check; lastTransitionTime moves only when Ready's status changes."""
    before = next((item for item in previous.conditions if item.type == "Ready"), None)
    moved = before is None or before.status != ready.status
    condition = Condition(type="Ready", status=ready.status, reason=ready.reason,  # type: ignore[arg-type]
                          message=ready.message, observed_generation=generation,
                          last_transition_time=format_time(now) if moved or before is None
                          else before.last_transition_time)
    return CatalogStatus(observed_generation=generation, last_checked=format_time(now), conditions=[condition])


def transition_event(previous: CatalogStatus, ready: Verdict) -> tuple[str, str, str] | None:
    """(type, reason, message) of the event for a new Ready status or reason; None when nothing changed."""
    before = next((item for item in previous.conditions if item.type == "Ready"), None)
    if before is not None and (before.status, before.reason) == (ready.status, ready.reason):
        return None
    return ("Normal" if ready.status == TRUE else "Warning", ready.reason, ready.message)
