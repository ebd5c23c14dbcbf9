"""The real world the protocol model judges: a SQLite catalog, real staged Parquet files, real committers.

A sink process talks to the catalog through a ``HookedCatalog``, which can run a disturbance just
before the process's next commit request (another writer's commit, expiry, a newer fence, a schema
change, a rollback: the interleavings between a fence check and its commit), fail that request the
ways a network can (a conflict, a request lost before it landed, an answer lost after it landed),
or kill the process right after its n-th commit landed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.metadata import TableMetadata

from icebergsync.protocol import Writer
from spark_app.commit.committer import SinkCommitter
from spark_app.staging.writer import TablePlan, rebuild_data_file
from tests.integration.protocol_model.oracle import Attempt, Claim

TABLE = "ns.events"
DEAD = "ns.dead"
# Each sink reads its own generator: ids base + 0, 1, 2, ... (the frontier is the next local id).
SINKS = {"ns/a": (0, {"kind": "generator"}), "ns/b": (1_000_000, {"kind": "generator", "stream": "b"})}
FAULTS = ("conflict", "lost-request", "lost-answer")


def is_bad(local_id: int) -> bool:
    """Every 7th record of a source cannot be ingested and goes to the dead-letter table."""
    return local_id % 7 == 3


def who(claim: Claim) -> str:
    """The value a sink's rows carry in the ``who`` column: the exact attempt that wrote them."""
    return f"{claim.sink}:v{claim.version}:{claim.attempt}"


def check_generator_frontier(frontier: dict[str, Any]) -> None:
    if set(frontier) != {"next_id"}:
        raise ValueError("not a generator frontier")


class Killed(BaseException):
    """kill -9 of one sink process: nothing of it runs after this."""


class HookedCatalog:
    """A sink process's view of the catalog (see the module docstring)."""

    def __init__(self, catalog: Catalog):
        self._catalog = catalog
        self.before_next_commit: Callable[[], None] | None = None
        self.fault: str | None = None
        self.kill_after_commits: int | None = None

    def commit_table(self, *args: Any) -> Any:
        disturbance, self.before_next_commit = self.before_next_commit, None
        if disturbance is not None:
            disturbance()
        fault, self.fault = self.fault, None
        if fault == "conflict":
            raise CommitFailedException("injected: another writer moved the head")
        if fault == "lost-request":
            raise ConnectionError("injected: the request was lost before it reached the catalog")
        response = self._catalog.commit_table(*args)
        time.sleep(0.002)  # distinct snapshot timestamps: format v1 places expired snapshots by them
        if fault == "lost-answer":
            raise ConnectionError("injected: the answer was lost after the commit landed")
        if self.kill_after_commits is not None:
            self.kill_after_commits -= 1
            if self.kill_after_commits == 0:
                raise Killed
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)


@dataclass
class SinkProcess:
    """One running attempt: the real committer, the plans it stages with, and the oracle's view of it."""

    committer: SinkCommitter
    catalog: HookedCatalog
    model: Attempt
    plan: TablePlan
    dead_plan: TablePlan

    @property
    def claim(self) -> Claim:
        return self.model.claim

    @property
    def base(self) -> int:
        return SINKS[self.claim.sink][0]


def new_committer(catalog: Catalog, claim: Claim) -> tuple[SinkCommitter, HookedCatalog]:
    hooked = HookedCatalog(catalog)
    committer = SinkCommitter(hooked, TABLE, Writer(claim.sink, claim.version, claim.attempt),  # type: ignore[arg-type]
                              DEAD, rebuild_data_file)
    return committer, hooked


def sink_summary(metadata: TableMetadata, snapshot_id: int) -> dict[str, str]:
    """The ``icebergsync.*`` summary properties of a snapshot, read as any engine would."""
    snapshot = metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    summary = snapshot.summary.additional_properties if snapshot.summary else {}
    return {k: v for k, v in summary.items() if k.startswith("icebergsync.")}


def checkpoint_json(metadata: TableMetadata, sink: str) -> dict[str, Any] | None:
    raw = metadata.properties.get(f"icebergsync.checkpoint.{sink}")
    return None if raw is None else json.loads(raw)
