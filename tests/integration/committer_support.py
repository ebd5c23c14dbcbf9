"""Helpers for committer tests: a real SQLite catalog and real staged Parquet files, no Spark."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from icebergsync.protocol import Writer, attempt_file_prefix
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.staging.writer import PartitionedWriter, TablePlan, conform, table_plan

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "who", StringType()))
TABLE = "ns.events"


def open_catalog(directory: Path) -> Catalog:
    return SqlCatalog("test", uri=f"sqlite:///{directory}/catalog.db", warehouse=(directory / "warehouse").as_uri())


def create_table(catalog: Catalog) -> Table:
    catalog.create_namespace_if_not_exists("ns")
    return catalog.create_table(TABLE, SCHEMA)


def stage(table: Table, writer: Writer, ids: range, plan: TablePlan | None = None) -> list[DataFile]:
    """Write ids as one real staged Parquet file of ``writer`` (with ``plan``, default: the table's now)."""
    return stage_rows(table, writer, {"id": list(ids), "who": [f"v{writer.version}"] * len(ids)}, plan)


def stage_rows(table: Table, writer: Writer, columns: dict[str, list[Any]], plan: TablePlan | None = None,
               row_group_rows: int | None = None) -> list[DataFile]:
    """Write ``columns`` as one real staged Parquet file of ``writer`` into ``table`` (per partition), in row groups
    of ``row_group_rows`` rows (of a partition) when given, else in one."""
    plan = plan or table_plan(table)
    rows = conform(pa.RecordBatch.from_pydict(columns), plan.arrow_schema())
    step = row_group_rows or max(1, rows.num_rows)
    # A memory budget of one byte writes each slice out as its own row group at once.
    files = PartitionedWriter(plan, attempt_file_prefix(writer) + "-00000-0", 1 << 30, 1 if row_group_rows else 1 << 26)
    for start in range(0, rows.num_rows, step):
        files.write(rows.slice(start, step))
    return files.finish()


def dead_letter_rows(writer: Writer, ids: list[int]) -> dict[str, list[Any]]:
    """Dead-letter rows for source ids ``ids`` (their payload is the id)."""
    now = datetime.now(UTC)
    return {"sink_id": [writer.sink_id] * len(ids), "sink_version": [writer.version] * len(ids),
            "payload": [str(i) for i in ids], "reason": ["bad"] * len(ids), "position": [None] * len(ids),
            "failed_at": [now] * len(ids)}


def commit_range(committer: SinkCommitter, table: Table, start: int, end: int) -> None:
    output = TriggerOutput(data_files=stage(table, committer.writer, range(start, end)), records=end - start)
    committer.commit(output, {"next_id": end})


def committed_ids(catalog: Catalog) -> list[int]:
    return sorted(catalog.load_table(TABLE).scan().to_arrow().column("id").to_pylist())
