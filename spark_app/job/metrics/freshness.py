"""How long a table's backlog has waited, in wall time and in event time: what tells a stuck sync (a backlog and
no commit, the seconds grow) from an idle one (no backlog: 0)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime


@dataclass
class Freshness:
    """One table's backlog and the times it is measured from (seconds since the epoch)."""

    clock: Callable[[], float] = time.time
    backlog: float = 0.0
    waiting_since: float | None = None  # the table last caught up or committed, while a backlog remains
    newest_event: float | None = None  # the newest event time committed
    last_commit: float | None = None

    def saw_backlog(self, backlog: float) -> None:
        """The source's backlog beyond the table's frontier now."""
        self.backlog = backlog
        if backlog <= 0:
            self.waiting_since = None
        elif self.waiting_since is None:
            self.waiting_since = self.clock()

    def committed(self, at: float, max_event_time: str | None, backlog: float | None) -> None:
        """A commit at ``at`` holding events up to ``max_event_time`` (ISO), ``backlog`` left after it."""
        self.last_commit = at
        if max_event_time:
            event = datetime.fromisoformat(max_event_time).timestamp()
            self.newest_event = event if self.newest_event is None else max(self.newest_event, event)
        if backlog is not None:
            self.backlog = backlog
        self.waiting_since = at if self.backlog > 0 else None

    def wall_seconds(self) -> float:
        """0 without a backlog, else the seconds since the table last caught up or committed."""
        return 0.0 if self.waiting_since is None else max(0.0, self.clock() - self.waiting_since)

    def event_seconds(self) -> float:
        """0 without a backlog, else now minus the newest event time committed (0 when none is known)."""
        if self.waiting_since is None or self.newest_event is None:
            return 0.0
        return max(0.0, self.clock() - self.newest_event)
