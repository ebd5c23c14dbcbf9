"""Locating a keyless trigger's removed copies on real tables (spark_app/commit/keyless_locate.py): exactly ``count`` live
rows equal to each removed row (every column, NULL equal to NULL), never a row the head already deletes, the
shortfall counted, files pruned by a column whose removed values are all non-null."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction

from icebergsync.catalog import ensure_table
from icebergsync.schema import iceberg_schema
from icebergsync.spec import Column
from spark_app.commit.key_index.locate import LocateStats
from spark_app.commit.keyless_locate import LocatedCopies, locate_copies
from spark_app.decoding.row_identity import COUNT_COLUMN
from spark_app.iceberg import internals
from spark_app.iceberg.position_deletes.stage import stage_position_deletes
from spark_app.staging.writer import PartitionedWriter, TablePlan, conform

COLUMNS = [Column(name="name", type="string"), Column(name="qty", type="long"), Column(name="score", type="double"),
           Column(name="tags", type="array<string>")]
R = {"name": "a", "qty": 1, "score": 0.5, "tags": ["x", None]}
NULLS = {"name": None, "qty": None, "score": None, "tags": None}
NAN = {"name": "n", "qty": None, "score": float("nan"), "tags": []}


def keyless_table(directory: Path, format_version: str) -> Table:
    catalog = SqlCatalog("test", uri=f"sqlite:///{directory}/catalog.db", warehouse=(directory / "warehouse").as_uri())
    return ensure_table(catalog, "ns.t", iceberg_schema(COLUMNS), [], {"format-version": format_version}, key=[])


def data_file(table: Table, rows: list[dict[str, object]], name: str) -> DataFile:
    plan = TablePlan(table.metadata.location, dict(table.properties), table.schema(), table.spec(), dict(table.io.properties))
    writer = PartitionedWriter(plan, f"isync-test-{name}", 1 << 30, 1 << 26)
    writer.write(conform(pa.RecordBatch.from_pylist(rows, schema=plan.arrow_schema()), plan.arrow_schema()))
    (written,) = writer.finish()
    return written


def commit(table: Table, data_files: list[DataFile], delete_files: list[DataFile] | None = None,
           removed: list[DataFile] | None = None) -> Table:
    transaction = Transaction(table)
    internals.row_delta(transaction, {"test": "1"}, data_files, delete_files or [], removed or [])
    internals.commit_transaction(table.catalog, table, transaction)
    return table.catalog.load_table("ns.t")


def removed(*rows_and_counts: tuple[dict[str, object], int]) -> pa.Table:
    rows = pa.Table.from_pylist([row for row, _ in rows_and_counts],
                                schema=pa.schema([(c.name, t) for c, t in zip(COLUMNS, [pa.string(), pa.int64(), pa.float64(),
                                                                                        pa.list_(pa.string())], strict=True)]))
    return rows.append_column(COUNT_COLUMN, pa.array([count for _, count in rows_and_counts], pa.int64()))


def positions(located: LocatedCopies) -> dict[str, list[int]]:
    return {path.rsplit("/", 1)[-1].split("-")[2]: sorted(int(p) for p in dv.to_numpy())
            for path, dv in located.positions.items()}


@pytest.mark.parametrize("format_version", ["2", "3"])
def test_exactly_count_live_copies_are_located_in_order_and_deleted_ones_never_again(tmp_path: Path,
                                                                                    format_version: str) -> None:
    table = keyless_table(tmp_path, format_version)
    assert not table.schema().identifier_field_ids
    other = {"name": "zzz", "qty": 7, "score": 1.0, "tags": None}
    first = data_file(table, [R, NULLS, R, NAN, other, R], "first")
    second = data_file(table, [NULLS, R, {**R, "tags": ["x"]}], "second")
    table = commit(table, [first, second])
    snapshot = table.current_snapshot()
    assert snapshot is not None

    located = locate_copies(table, snapshot, removed((R, 2), (NULLS, 2), (NAN, 1), ({**NULLS, "qty": 0}, 1)))
    # The first copies in (file path, position) order; "first" sorts before "second".
    assert positions(located) == {"first": [0, 1, 2, 3], "second": [0]} and located.unmatched == 1
    table = commit(table, [], stage_position_deletes(table, located.positions, "isync-test-del").added)
    snapshot = table.current_snapshot()
    assert snapshot is not None

    # Those are deleted now: the next removal takes the copies still live, and counts what the table lacks.
    again = locate_copies(table, snapshot, removed((R, 3), (NULLS, 1)))
    assert positions(again) == {"first": [5], "second": [1]} and again.unmatched == 2


def test_files_are_pruned_by_a_column_whose_removed_values_are_all_non_null(tmp_path: Path) -> None:
    table = keyless_table(tmp_path, "2")
    files = [data_file(table, [{**R, "name": f"{letter}{i}"} for i in range(3)], letter) for letter in "bcd"]
    table = commit(table, files)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    stats = LocateStats()
    located = locate_copies(table, snapshot, removed(({**R, "name": "c1"}, 1)), stats=stats)
    assert positions(located) == {"c": [1]} and stats.files_skipped_by_bounds == 2
    stats = LocateStats()  # a NULL name: pruned by qty, which every file's bounds hold
    located = locate_copies(table, snapshot, removed(({**R, "name": None}, 1)), stats=stats)
    assert located.positions == {} and located.unmatched == 1 and stats.files == 3
