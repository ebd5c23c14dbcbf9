"""Whether a catalog commits a cut of several tables atomically: the job (spark_app/iceberg/cut.py) and the
operator's ``AtomicCuts`` condition decide it here, the same way.

A SQL catalog (pyiceberg's ``SqlCatalog``: the ``iceberg_tables`` layout of Iceberg's JDBC catalog) moves every
table's pointer in one database transaction, if its driver reports the rows an UPDATE matched (the
compare-and-swap counts them). A REST catalog whose user declares, with the catalog property
``icebergsync.atomic-multi-table-commit: "true"``, that its server commits ``POST /v1/transactions/commit``
atomically (Project Nessie does: one Nessie commit) sends a cut as that one request; nothing guesses it, since
the REST protocol does not say, and Iceberg's reference server is NOT atomic there. Every other catalog commits
one table at a time (docs/protocol.md, "Where the catalog cannot").
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from icebergsync import spec as model

ATOMIC_MULTI_TABLE_COMMIT = "icebergsync.atomic-multi-table-commit"
"""Catalog property (``spec.table.catalog.properties`` or the IcebergCatalog's): ``"true"`` declares that the REST
catalog's server commits ``POST /v1/transactions/commit`` atomically (all tables or none, every requirement
checked). Only for a server known to do so (Project Nessie); Iceberg's reference server does not."""


def declares_atomic_multi_table_commit(properties: dict[str, str]) -> bool:
    return str(properties.get(ATOMIC_MULTI_TABLE_COMMIT, "")).strip().lower() == "true"


@dataclass(frozen=True)
class CutSupport:
    """Whether cuts are atomic, with a CamelCase reason and a sentence saying why."""

    atomic: bool
    reason: str
    message: str


def cut_support(catalog_type: str, sane_rowcount: bool, declared_atomic: bool = False) -> CutSupport:
    """The decision for a catalog of ``catalog_type`` whose SQL driver does (or not) report matched rows, and (a
    REST catalog) whose properties declare (or not) an atomic ``/v1/transactions/commit``."""
    if catalog_type == "rest" and declared_atomic:
        return CutSupport(True, "RestCatalogDeclaredAtomic",
                          f"the REST catalog is declared ({ATOMIC_MULTI_TABLE_COMMIT}) to commit a trigger's tables "
                          "atomically: they are sent as one POST /v1/transactions/commit, and a reader sees all of "
                          "them or none, as far as the server keeps that promise")
    if catalog_type != "sql":
        return CutSupport(False, "CatalogCommitsTablesOneByOne",
                          f"a {catalog_type} catalog commits one table at a time: each table of a trigger is "
                          "committed by its own compare-and-swap, and a reader may see some of a trigger's tables "
                          "before the others (each table stays exactly once)")
    if not sane_rowcount:
        return CutSupport(False, "DriverCountsNoRows",
                          "the SQL catalog's driver does not report the rows an UPDATE matched: tables are "
                          "committed one at a time")
    return CutSupport(True, "SqlCatalog", "the SQL catalog moves every table's pointer of a trigger in one "
                                          "database transaction: a reader sees all of a trigger's tables or none")


def catalog_cut_support(catalog: Catalog) -> CutSupport:
    """The decision for an open pyiceberg catalog (the job's)."""
    if isinstance(catalog, SqlCatalog):
        return cut_support("sql", bool(catalog.engine.dialect.supports_sane_rowcount))
    if isinstance(catalog, RestCatalog):
        return cut_support("rest", False, declares_atomic_multi_table_commit(catalog.properties))
    return cut_support(type(catalog).__name__, False)


def spec_cut_support(catalog: model.Catalog) -> CutSupport:
    """The decision for a spec's catalog, without connecting (the operator's): the driver from the URI."""
    if catalog.type != "sql":
        return cut_support(catalog.type, False, declares_atomic_multi_table_commit(catalog.properties))
    try:
        dialect = make_url(catalog.uri).get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError):
        return CutSupport(False, "UnknownSqlDriver", "the SQL catalog's URI names no driver this operator knows: "
                                                     "tables are taken to be committed one at a time")
    return cut_support("sql", bool(dialect.supports_sane_rowcount))
