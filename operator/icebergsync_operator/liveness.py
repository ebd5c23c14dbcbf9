"""What the liveness probe checks: no reconcile has been running for longer than any reconcile can.

A reconcile's catalog read ends at its deadline (``catalog_reads``), so no tenant can keep one
running; one still running after ``--reconcile-stuck-after`` is stuck elsewhere (an API call that
never returns, an executor with no free thread, a deadlock), and restarting the operator is the cure.
The event loop itself serves the probe, so a blocked loop fails it too.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class ReconcileWatch:
    """The reconciles in flight and when each started (used on the event loop only)."""

    stuck_after: float
    _running: dict[int, tuple[str, float]] = field(default_factory=dict)
    _tokens: Iterator[int] = field(default_factory=itertools.count)

    @contextmanager
    def track(self, namespace: str, name: str) -> Iterator[None]:
        token = next(self._tokens)
        self._running[token] = (f"{namespace}/{name}", time.monotonic())
        try:
            yield
        finally:
            del self._running[token]

    def report(self, now: float | None = None) -> dict[str, object]:
        """The probe's answer: reconciles in flight and the longest one's age."""
        now = time.monotonic() if now is None else now
        ages = [now - started for _, started in self._running.values()]
        return {"reconciling": len(ages), "longestSeconds": round(max(ages, default=0.0), 1)}

    def stuck(self, now: float | None = None) -> list[str]:
        """The syncs whose reconcile has run longer than ``stuck_after``."""
        now = time.monotonic() if now is None else now
        return sorted(sync for sync, started in self._running.values() if now - started > self.stuck_after)
