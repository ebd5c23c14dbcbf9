"""Commit several tables' transactions as ONE atomic catalog change (a *consistent cut*) where the catalog can.

On a ``sql`` catalog (pyiceberg's ``SqlCatalog``, whose ``iceberg_tables`` layout is that of Iceberg's JDBC
catalog) every table's new metadata file is written first, then one database transaction moves every
table's metadata pointer::

    UPDATE iceberg_tables SET metadata_location = <new>, previous_metadata_location = <old>
     WHERE catalog_name = … AND table_namespace = … AND table_name = … AND metadata_location = <old>

(the statement pyiceberg's and Iceberg's own commits use for one table), in one fixed order (by identifier,
so that two cuts lock rows in the same order on PostgreSQL). If any row does not match, the transaction
rolls back: no pointer moved, and the cut raises ``CommitFailedException``, a conflict the caller
re-checks its fences for and rebuilds, as for one table. The one-table commit of every sink goes through
here too (:func:`spark_app.iceberg.internals.commit_transaction`): the single-table sync is the one-table cut.

On a ``rest`` catalog declared atomic by its user (catalog property ``icebergsync.atomic-multi-table-commit:
"true"``, :mod:`icebergsync.tables.cuts`) the cut is ONE ``POST /v1/{prefix}/transactions/commit`` (the REST
spec's ``CommitTransactionRequest``: each table's ``CommitTableRequest``, the body pyiceberg sends for one
table, keyed by its identifier), sent with pyiceberg's own HTTP session. Project Nessie commits it as one Nessie
commit, every requirement checked against the same branch head, all or none (tests/integration/
test_rest_atomic_cut.py). Iceberg's reference server (1.10.1) checks every table's requirements, then commits
the tables one after another: a table moved by another writer between the two leaves the earlier tables
committed, so the property must not be set for it (the same test shows that).

Other catalogs commit one table at a time (``catalog.commit_table``); a cut of several tables is refused
there (:class:`AtomicCutUnsupportedError`), and the caller commits table by table instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.rest.response import _handle_non_200_response
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.table import (
    CommitTableRequest,
    CommitTableResponse,
    StagedTable,
    Table,
    TableIdentifier,
    Transaction,
)
from pyiceberg.table.update import TableRequirement
from requests import HTTPError
from sqlalchemy import update
from sqlalchemy.orm import Session

from icebergsync.errors import IcebergSyncError
from icebergsync.tables.cuts import catalog_cut_support
from spark_app.faults import crash_point


class AtomicCutUnsupportedError(IcebergSyncError):
    """The catalog cannot move several tables' metadata in one atomic change."""


@dataclass(frozen=True)
class TableChange:
    """One table's part of a cut: the transaction built on ``table`` and requirements beyond its own."""

    table: Table
    transaction: Transaction
    requirements: tuple[TableRequirement, ...] = ()

    def all_requirements(self) -> tuple[TableRequirement, ...]:
        return (*self.transaction._requirements, *self.requirements)


def atomic_cut_supported(catalog: Catalog) -> bool:
    """Whether ``catalog`` commits a cut of several tables atomically (a SQL catalog whose driver reports
    the rows an UPDATE matched: :func:`icebergsync.tables.cuts.catalog_cut_support`, which the operator's
    ``AtomicCuts`` condition shares)."""
    return catalog_cut_support(catalog).atomic


def commit_cut(catalog: Catalog, changes: Sequence[TableChange]) -> list[CommitTableResponse]:
    """Send every change once, all or none; the responses in the order of ``changes``.

    Nothing is retried or rebased: a requirement that fails or a pointer another writer moved raises
    ``CommitFailedException`` and no table changed. Any other exception leaves the outcome unknown (the
    database may have committed before the answer was lost), as for one table.
    """
    if atomic_cut_supported(catalog):
        if isinstance(catalog, RestCatalog):
            return _commit_rest(catalog, changes) if len(changes) > 1 else [
                catalog.commit_table(changes[0].table, changes[0].all_requirements(), changes[0].transaction._updates)]
        assert isinstance(catalog, SqlCatalog)
        return _commit_sql(catalog, changes)
    if len(changes) > 1:
        raise AtomicCutUnsupportedError(
            f"catalog {catalog.name!r} ({type(catalog).__name__}) cannot commit {len(changes)} tables atomically"
        )
    return [catalog.commit_table(change.table, change.all_requirements(), change.transaction._updates)
            for change in changes]


def _commit_sql(catalog: SqlCatalog, changes: Sequence[TableChange]) -> list[CommitTableResponse]:
    staged: list[tuple[Table, StagedTable]] = []
    for change in changes:
        identifier = change.table.name()
        current = catalog.load_table(identifier)
        staged.append((current, catalog._update_and_stage_table(current, identifier, change.all_requirements(),
                                                                change.transaction._updates)))
    landing = [_landing(current, new) for current, new in staged]
    for (_, new), location in zip(staged, landing, strict=True):
        if location != new.metadata_location:
            continue
        catalog._write_metadata(metadata=new.metadata, io=new.io, metadata_path=new.metadata_location)
    with Session(catalog.engine) as session, session.begin():  # rolled back on any exception
        for (current, _), location in sorted(zip(staged, landing, strict=True), key=lambda pair: pair[0][0].name()):
            namespace, name = Catalog.namespace_to_string(current.name()[:-1]), current.name()[-1]
            moves = {"metadata_location": location}
            if location != current.metadata_location:
                moves["previous_metadata_location"] = current.metadata_location
            # An unchanged table is checked (and locked) all the same: it is part of the cut.
            result = session.execute(
                update(IcebergTables)
                .where(IcebergTables.catalog_name == catalog.name, IcebergTables.table_namespace == namespace,
                       IcebergTables.table_name == name, IcebergTables.metadata_location == current.metadata_location)
                .values(**moves)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                raise CommitFailedException(f"Table has been updated by another process: {namespace}.{name}")
    return [CommitTableResponse(metadata=new.metadata, metadata_location=location)  # type: ignore[call-arg]
            for (_, new), location in zip(staged, landing, strict=True)]


TRANSACTIONS_COMMIT = "transactions/commit"


def _commit_rest(catalog: RestCatalog, changes: Sequence[TableChange]) -> list[CommitTableResponse]:
    """ONE ``POST /v1/{prefix}/transactions/commit`` of every change (a catalog declared atomic).

    The server answers 204 with no body: each table is loaded afterwards, and its response is the metadata
    loaded, in which the caller looks up the snapshot its change added. Another writer's commit on top of it in
    between hides it on Nessie, whose table metadata holds the current snapshot only (the table's history is
    Nessie's commit log): the caller then finds it named by the checkpoint property the change wrote
    (:func:`spark_app.commit.swap.swap`). 409 is a conflict (nothing landed); 500, 502, 503 and 504 leave the
    outcome unknown, as for one table.

    Crash points (spark_app/faults.py): ``cut-sending`` before the request, every table built and checked;
    ``cut-committed`` once the server has accepted it.
    """
    requests = []
    for change in changes:
        identifier = change.table.name()
        requests.append(CommitTableRequest(identifier=TableIdentifier(namespace=identifier[:-1],  # type: ignore[arg-type]
                                                                         name=identifier[-1]),
                                           requirements=change.all_requirements(), updates=change.transaction._updates))
    body = '{"table-changes":[' + ",".join(request.model_dump_json() for request in requests) + "]}"
    crash_point("cut-sending")
    response = catalog._session.post(catalog.url(TRANSACTIONS_COMMIT, prefixed=True), data=body.encode("utf-8"))
    try:
        response.raise_for_status()
    except HTTPError as exc:
        _handle_non_200_response(exc, {409: CommitFailedException, 500: CommitStateUnknownException,
                                       502: CommitStateUnknownException, 503: CommitStateUnknownException,
                                       504: CommitStateUnknownException})
    crash_point("cut-committed")
    responses = []
    for change in changes:
        table = catalog.load_table(change.table.name())
        responses.append(CommitTableResponse(metadata=table.metadata,  # type: ignore[call-arg]
                                             metadata_location=table.metadata_location))
    return responses


def _landing(current: Table, new: StagedTable) -> str:
    """The metadata location ``current``'s table has after the cut (its own when the change changes nothing)."""
    return current.metadata_location if new.metadata == current.metadata else new.metadata_location
