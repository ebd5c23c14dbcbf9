"""Whether a catalog commits a cut of several tables atomically: the job (spark_app/multi_table/cut.py) and the
operator's ``AtomicCuts`` condition decide it here, the same way.

A SQL catalog (pyiceberg's ``SqlCatalog``: the ``iceberg_tables`` layout of Iceberg's JDBC catalog) moves every
table's pointer in one database transaction, if its driver reports the rows an UPDATE matched (the
compare-and-swap counts them). Every other catalog commits one table at a time (docs/protocol.md, "Where the
catalog cannot").
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from icebergsync import spec as model


@dataclass(frozen=True)
class CutSupport:
    """Whether cuts are atomic, with a CamelCase reason and a sentence saying why."""

    atomic: bool
    reason: str
    message: str


def cut_support(catalog_type: str, sane_rowcount: bool) -> CutSupport:
    """The decision for a catalog of ``catalog_type`` whose SQL driver does (or not) report matched rows."""
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
    return cut_support(type(catalog).__name__, False)


def spec_cut_support(catalog: model.Catalog) -> CutSupport:
    """The decision for a spec's catalog, without connecting (the operator's): the driver from the URI."""
    if catalog.type != "sql":
        return cut_support(catalog.type, False)
    try:
        dialect = make_url(catalog.uri).get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError):
        return CutSupport(False, "UnknownSqlDriver", "the SQL catalog's URI names no driver this operator knows: "
                                                     "tables are taken to be committed one at a time")
    return cut_support("sql", bool(dialect.supports_sane_rowcount))
