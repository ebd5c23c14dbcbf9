"""Crash injection for the exactly-once tests: ``ICEBERGSYNC_CRASH_AT=<point>:<n>`` kills the job
with SIGKILL the n-th time it reaches ``point`` (``fenced``, ``staged``,
``main-committed`` — between the main and the dead-letter commit — ``committed``, for keyed
tables' maintenance ``maintenance-staged`` and ``maintenance-committed``, ``table-committed``
after each table's commit of a trigger that a catalog without atomic cuts commits table by table, and on a
REST catalog declared atomic ``cut-sending`` just before a cut's one ``POST /v1/transactions/commit`` — every
table checked and built, nothing sent — and ``cut-committed`` just after the server accepted it, before the job
knows what landed).

Unset (always, outside tests) it does nothing.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "ICEBERGSYNC_CRASH_AT"
_reached: dict[str, int] = {}


def crash_point(point: str) -> None:
    """SIGKILL this process if the crash plan names ``point`` and it is reached for the planned time."""
    plan = os.environ.get(CRASH_ENV)
    if not plan:
        return
    name, _, count = plan.partition(":")
    if name != point:
        return
    _reached[point] = _reached.get(point, 0) + 1
    if _reached[point] == int(count or 1):
        os.kill(os.getpid(), signal.SIGKILL)
