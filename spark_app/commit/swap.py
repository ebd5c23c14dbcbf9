"""The fenced compare-and-swap every commit of a sink goes through: data (one table or a cut), schema,
maintenance, expiry and dead letters.

pyiceberg's own commit loop (which rebases a conflicting commit onto the new head) is bypassed, because a rebase
would let a stale writer land on top of a newer one. Each round loads the head, checks the table's pin and the
commit's fence check on it, builds the transaction on it and sends it requiring that head; on a conflict the next
round does it all again. On an unknown outcome (e.g. a 5xx from a REST catalog) the table is searched for the
snapshot ids attempted before anything else. Refusals are distinct errors: ``FencedError``,
``ProgressConflictError``, ``TableChangedError``, ``BadInputError``, ``MaintenanceConflictError``;
``CommitStateUnknownError`` when the outcome stays unknown.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AssertCurrentSchemaId, AssertTableUUID, TableRequirement

from icebergsync import protocol
from icebergsync.errors import (
    BadInputError,
    CommitStateUnknownError,
    FencedError,
    IcebergSyncError,
    ProgressConflictError,
    TableChangedError,
)
from icebergsync.transient.calls import last_line, retry_transient
from spark_app.iceberg.cut import TableChange
from spark_app.iceberg.internals import (
    added_snapshot,
    commit_transactions,
    main_head_requirement,
    written_metadata,
)

log = logging.getLogger("icebergsync.committer")
CLEANUP_BUDGET_SECONDS = 30.0  # how long deleting what never landed rides out faults (start-up cleanup is next)
UNKNOWN_OUTCOME_DEADLINE_SECONDS = 300.0

T = TypeVar("T")


class MaintenanceConflictError(IcebergSyncError):
    """Main moved while a rewrite was planned: nothing was committed, plan again later."""


# What a round's checks raise when the commit certainly did not land: what it wrote may be deleted.
REFUSALS = (FencedError, ProgressConflictError, TableChangedError, BadInputError, MaintenanceConflictError)


@dataclass(frozen=True)
class TablePin:
    """What a sink fixed about a table when it fenced it: every later commit asserts both."""

    table_uuid: str
    schema_id: int

    @staticmethod
    def of(metadata: TableMetadata) -> TablePin:
        return TablePin(str(metadata.table_uuid), metadata.current_schema_id)

    def check(self, identifier: str, metadata: TableMetadata) -> None:
        """Raise ``TableChangedError`` when ``metadata`` is another table, or has another schema, than pinned."""
        if str(metadata.table_uuid) != self.table_uuid:
            raise TableChangedError(
                f"table {identifier} was dropped and recreated while this sink ran (uuid {self.table_uuid} is now "
                f"{metadata.table_uuid}); nothing more was written to it. A restart resumes from the new table"
            )
        if metadata.current_schema_id != self.schema_id:
            raise TableChangedError(
                f"the schema of {identifier} was changed by another writer while this sink ran (schema id "
                f"{self.schema_id} is now {metadata.current_schema_id}); the files staged under the old schema were "
                "not committed. A restart re-plans its writes from the current schema"
            )


@dataclass(frozen=True)
class Commit:
    """A commit that landed: its snapshot and how long the compare-and-swap took."""

    snapshot: Snapshot
    commit_ms: float


# A transaction built on a head, with the id of the snapshot it adds (None: it adds none, as an expiry, which is
# swapped alone), or None when there is nothing to commit on that head.
Built = tuple[Transaction, int | None] | None


@dataclass(frozen=True)
class SwapPart:
    """One table's part of a compare-and-swap: its pin (once fenced), the check its head must pass, and the
    transaction built on that head (with the id of the snapshot it adds)."""

    identifier: str
    pin: TablePin | None
    check: Callable[[TableMetadata], None]
    build: Callable[[Table], Built]


@dataclass(frozen=True)
class Swapped:
    """What one part of a compare-and-swap landed: its snapshot (None for a commit adding none) and the table
    metadata it landed in."""

    snapshot: Snapshot | None
    metadata: TableMetadata


class _Retry:
    """The retry policy of one compare-and-swap against the catalog.

    A conflict (another writer moved the head) is retried at once after a short jittered backoff; an
    unknown outcome (the request failed in a way that does not say whether it landed) is retried
    until ``UNKNOWN_OUTCOME_DEADLINE_SECONDS``, after which ``CommitStateUnknownError`` is raised.
    Either way the caller re-reads the table and re-checks the fence before the next round.
    """

    def __init__(self, action: str, identifier: str):
        self._action = action
        self._identifier = identifier
        self._deadline = time.monotonic() + UNKNOWN_OUTCOME_DEADLINE_SECONDS
        self._rounds = 0

    def attempt(self, request: Callable[[], T], on_unknown: str) -> T | None:
        """``request()``'s result, or None when the caller should re-check and try again."""
        self._rounds += 1
        try:
            return request()
        except CommitFailedException as exc:
            log.info("%s conflict on %s (round %d): %s; re-checking the fence", self._action, self._identifier,
                     self._rounds, exc)
            time.sleep(random.uniform(0.0, min(1.0, 0.01 * 2**min(self._rounds, 7))))
        except (IcebergSyncError, KeyboardInterrupt):
            raise
        except Exception as exc:  # unknown outcome: the request may or may not have landed
            if time.monotonic() > self._deadline:
                raise CommitStateUnknownError(
                    f"{self._action} on {self._identifier} failed with an unknown outcome for "
                    f"{UNKNOWN_OUTCOME_DEADLINE_SECONDS:.0f}s: {exc}"
                ) from exc
            log.warning("%s on %s had an unknown outcome (%s); %s", self._action, self._identifier, exc, on_unknown)
            time.sleep(min(5.0, 0.2 * 2**min(self._rounds, 5)))
        return None


def swap(catalog: Catalog, parts: Sequence[SwapPart], action: str = "commit") -> list[Swapped] | None:
    """Commit every part's transaction, all in one cut (spark_app/iceberg/cut.py), iff every part's pin and
    ``check`` pass on the head its transaction was built on; per part what landed, or None when a part had nothing
    to commit on its head (nothing was sent then).

    The manifests and manifest lists of the rounds that did not land are deleted once one did, all of them when
    the swap is refused (an unknown outcome keeps them: the start-up cleanup deletes those no snapshot references).
    """
    rounds: dict[int, tuple[str, Transaction]] = {}
    try:
        landed = _swap_rounds(catalog, parts, rounds, action)
    except REFUSALS:
        _delete_lost_rounds(catalog, rounds, set())
        raise
    _delete_lost_rounds(catalog, rounds, {s.snapshot.snapshot_id for s in landed or () if s.snapshot is not None})
    return landed


def swap_cut(catalog: Catalog, parts: Sequence[SwapPart]) -> list[tuple[Snapshot, TableMetadata]]:
    """:func:`swap` of parts that each add a snapshot: per part the snapshot that landed and the metadata it
    landed in."""
    landed = []
    for part, swapped in zip(parts, swap(catalog, parts) or [], strict=True):
        if swapped.snapshot is None:
            raise IcebergSyncError(f"the commit to {part.identifier} added no snapshot")
        landed.append((swapped.snapshot, swapped.metadata))
    return landed


def delete_quietly(catalog: Catalog, identifier: str, paths: Sequence[str]) -> None:
    """Delete files of table ``identifier`` that no snapshot references, as well as the catalog and the object store
    let it: a fault here never stops the sync nor hides the error that led here (it may be on its way up). What
    stays is the start-up cleanup's (:func:`spark_app.commit.cleanup.cleanup_orphans`), which runs under the
    fence."""
    remaining = list(paths)
    if not remaining:  # nothing to delete: no table load either (after every commit that landed as built)
        return

    def delete_remaining() -> None:
        io = catalog.load_table(identifier).io
        while remaining:
            with contextlib.suppress(FileNotFoundError):
                io.delete(remaining[-1])
            remaining.pop()

    try:
        retry_transient(f"delete {len(remaining)} file(s) of {identifier}", delete_remaining,
                        budget_seconds=CLEANUP_BUDGET_SECONDS)
    except Exception as error:
        log.warning("%s: could not delete %d file(s) no snapshot references (%s); the next start-up's cleanup removes "
                    "them", identifier, len(remaining), last_line(error))


def _delete_lost_rounds(catalog: Catalog, rounds: Mapping[int, tuple[str, Transaction]], landed: set[int]) -> None:
    """Delete what the transactions of ``rounds`` (snapshot id -> table, transaction) wrote for snapshots not
    ``landed``."""
    lost: dict[str, list[str]] = {}
    for snapshot_id, (identifier, transaction) in rounds.items():
        if snapshot_id not in landed:
            lost.setdefault(identifier, []).extend(written_metadata(transaction))
    for identifier, paths in lost.items():
        delete_quietly(catalog, identifier, paths)


def _swap_rounds(catalog: Catalog, parts: Sequence[SwapPart], rounds: dict[int, tuple[str, Transaction]],
                 action: str) -> list[Swapped] | None:
    """The rounds of :func:`swap`, recording in ``rounds`` each transaction built by the snapshot id it adds.

    Each round loads every table, checks its pin and its ``check``, builds its transaction and sends the
    cut, requiring each table's uuid and current schema to be those checked: a schema change by another
    writer between the check and the commit (which moves no head) is a conflict, never files of the old
    schema landing under the new. A transaction that adds no snapshot requires main's head itself (a snapshot's
    producer requires it for the others); it is idempotent, so its unknown outcome is retried like a conflict.
    A conflict on any table starts a new round for all; after an unknown
    outcome the tables are searched for the snapshot ids attempted, which a cut shows on every table or on none:
    in the table's snapshots, or named by a checkpoint property of the table, which the same commit wrote (Nessie's
    table metadata keeps the current snapshot only, so another writer's commit on top hides ours there).
    """
    attempted: list[list[int]] = [[] for _ in parts]
    built: dict[int, Transaction] = {}
    names = ", ".join(part.identifier for part in parts)
    retry = _Retry(action, names)
    while True:
        tables = [catalog.load_table(part.identifier) for part in parts]
        landed = [next((s for s in map(table.metadata.snapshot_by_id, ids) if s is not None), None)
                  or _named_by_checkpoint(table.metadata, ids, built)
                  for table, ids in zip(tables, attempted, strict=True)]
        if any(snapshot is not None for snapshot in landed):
            if any(snapshot is None for snapshot in landed):
                raise CommitStateUnknownError(f"a cut of {names} landed on some of its tables only: the catalog "
                                              "did not commit it atomically; nothing more was written")
            return [Swapped(snapshot, table.metadata) for snapshot, table in zip(landed, tables, strict=True)]
        changes, snapshot_ids = [], []
        for part, table in zip(parts, tables, strict=True):
            if part.pin is not None:
                part.pin.check(part.identifier, table.metadata)
            part.check(table.metadata)
        for part, table, ids in zip(parts, tables, attempted, strict=True):
            built_on_head = part.build(table)
            if built_on_head is None:
                return None
            transaction, snapshot_id = built_on_head
            requirements: tuple[TableRequirement, ...] = (
                AssertTableUUID(uuid=table.metadata.table_uuid),
                AssertCurrentSchemaId(current_schema_id=table.metadata.current_schema_id),  # type: ignore[call-arg]
            )
            if snapshot_id is None:
                requirements = (*requirements, main_head_requirement(table.metadata))
            else:
                built[snapshot_id] = transaction
                rounds[snapshot_id] = part.identifier, transaction
                ids.append(snapshot_id)
            snapshot_ids.append(snapshot_id)
            changes.append(TableChange(table, transaction, requirements))
        responses = retry.attempt(partial(commit_transactions, catalog, changes),
                                  f"looking for snapshot(s) {attempted}")
        if responses is None:
            continue
        result = []
        for part, response, snapshot_id in zip(parts, responses, snapshot_ids, strict=True):
            snapshot = None if snapshot_id is None else (
                response.metadata.snapshot_by_id(snapshot_id)
                or _named_by_checkpoint(response.metadata, [snapshot_id], built))
            if snapshot is None and snapshot_id is not None:
                raise CommitStateUnknownError(
                    f"commit to {part.identifier} succeeded but snapshot {snapshot_id} is missing")
            result.append(Swapped(snapshot, response.metadata))
        return result


def _named_by_checkpoint(metadata: TableMetadata, ids: Sequence[int], built: Mapping[int, Transaction]) -> Snapshot | None:
    """The attempted snapshot (one of ``ids``) a checkpoint property of the table names, as its transaction added it.

    Every commit sent through :func:`swap` by a sink sets its checkpoint property to name the snapshot it adds, in
    the same commit: the property naming an attempted id proves that attempt landed, though the metadata may no longer
    hold its snapshot (on Nessie, whose table metadata holds the current snapshot only, after another writer's commit
    on top of it). A property that cannot be read names nothing here (the checks read it again and say so).
    """
    for key, value in metadata.properties.items():
        if not key.startswith(protocol.CHECKPOINT_PREFIX):
            continue
        try:
            named = json.loads(value).get("snapshot-id")
        except (ValueError, AttributeError):
            continue
        if named in ids and named in built:
            return added_snapshot(built[named], named)
    return None
