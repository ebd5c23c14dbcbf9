"""The key index on real tables: ``locate_rows`` finds exactly the rows holding the touched keys, reads
only the row groups Bloom filters and statistics cannot rule out, and stays right across files it
has no filter for, a renamed key column and its cache of earlier triggers."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.types import LongType, NestedField, StringType
from pyspark.sql import SparkSession

from spark_app.commit.key_index import locate
from spark_app.commit.key_index.file_keys import FileKeysCache
from spark_app.commit.key_index.key_columns import KeyColumn, KeyColumnCache
from spark_app.commit.key_index.locate import LocateStats, locate_rows
from spark_app.iceberg import internals
from spark_app.staging.writer import PartitionedWriter, TablePlan, conform

SCHEMA = Schema(NestedField(1, "key", StringType(), required=True), NestedField(2, "value", LongType()),
                identifier_field_ids=[1])
FILES, ROWS_PER_FILE = 8, 2_000


def keyed_table(directory: Path) -> Table:
    catalog = SqlCatalog("test", uri=f"sqlite:///{directory}/catalog.db", warehouse=(directory / "warehouse").as_uri())
    catalog.create_namespace("ns")
    return catalog.create_table("ns.t", SCHEMA, properties={"format-version": "2"})


_RANDOM = random.Random()


@pytest.fixture(autouse=True)
def _the_same_keys_every_run() -> None:
    """Random keys, but the same in every run: what the Bloom filters pass is then a fixed figure, not a draw that
    fails one run in about sixteen (two false positives among six row groups)."""
    _RANDOM.seed(20261126)


def random_keys(count: int) -> list[str]:
    return [str(uuid.UUID(int=_RANDOM.getrandbits(128), version=4)) for _ in range(count)]


def sink_file(table: Table, keys: list[str], name: str) -> DataFile:
    """One data file as the sink writes it (Bloom filters on the key column)."""
    plan = TablePlan(table.metadata.location, dict(table.properties), table.schema(), table.spec(), dict(table.io.properties))
    writer = PartitionedWriter(plan, f"isync-test-{name}", 1 << 30, 1 << 26)
    batch = pa.RecordBatch.from_pydict({"key": keys, "value": list(range(len(keys)))})
    writer.write(conform(batch, plan.arrow_schema()))
    (data_file,) = writer.finish()
    return data_file


def commit(table: Table, data_files: list[DataFile]) -> Table:
    transaction = Transaction(table)
    internals.row_delta(transaction, {"test": "1"}, data_files, [], [])
    internals.commit_transaction(table.catalog, table, transaction)
    return table.catalog.load_table("ns.t")


def truth(table: Table, wanted: set[str]) -> dict[str, list[int]]:
    """Brute force: every live data file's positions of ``wanted`` keys, read whole."""
    found = {}
    for task in table.scan().plan_files():
        column = pq.read_table(task.file.file_path.removeprefix("file://")).column(0)
        positions = pc.indices_nonzero(pc.is_in(column, pa.array(sorted(wanted)))).to_pylist()
        if positions:
            found[task.file.file_path] = positions
    return found


def located(table: Table, keys: list[str], cache: FileKeysCache, stats: LocateStats,
            column: str = "key") -> dict[str, list[int]]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    result = locate_rows(table, snapshot, pa.table({column: keys}), cache, stats)
    return {path: sorted(vector) for path, vector in result.items()}


def test_random_keys_are_located_exactly_reading_only_the_row_groups_that_hold_them(tmp_path: Path) -> None:
    table = keyed_table(tmp_path)
    files = [random_keys(ROWS_PER_FILE) for _ in range(FILES)]
    table = commit(table, [sink_file(table, keys, f"f{i}") for i, keys in enumerate(files)])
    touched = files[2][:50] + files[5][-3:] + random_keys(20)  # 53 present, in 2 files; 20 absent
    cache, stats = FileKeysCache(), LocateStats()
    assert located(table, touched, cache, stats) == truth(table, set(touched))
    assert stats.files == FILES and stats.files_skipped_by_bounds == 0  # uuids: bounds prune nothing
    # a filter passes a foreign key with p = 0.001, so 73 keys read another row group with p < 0.07
    assert stats.row_groups_skipped_by_bloom >= FILES - 3
    assert stats.rows_read <= 3 * ROWS_PER_FILE
    assert (cache.hits, cache.misses) == (0, FILES)

    again = LocateStats()
    assert located(table, touched, cache, again) == truth(table, set(touched))
    assert (cache.hits, cache.misses) == (FILES, FILES)  # immutable files: nothing read twice for pruning


def test_files_of_other_writers_without_filters_and_a_renamed_key_column_are_still_searched(tmp_path: Path) -> None:
    table = keyed_table(tmp_path)
    ours = random_keys(ROWS_PER_FILE)
    table = commit(table, [sink_file(table, ours, "ours")])
    foreign = random_keys(ROWS_PER_FILE)
    table.append(pa.table({"key": pa.array(foreign, pa.string()), "value": pa.array(range(ROWS_PER_FILE), pa.int64())},
                          schema=table.schema().as_arrow()))  # pyiceberg's writer: no Bloom filters
    with table.update_schema() as update:
        update.rename_column("key", "id")
    table = table.catalog.load_table("ns.t")
    touched = ours[:10] + foreign[-10:] + random_keys(10)
    stats = LocateStats()
    result = located(table, touched, FileKeysCache(), stats, column="id")
    assert result == {path: positions for path, positions in truth(table, set(touched)).items()}
    assert sum(len(p) for p in result.values()) == 20
    assert stats.rows_read == 2 * ROWS_PER_FILE  # no filter in the foreign file: read; ours holds 10


def test_a_large_locate_reads_in_spark_tasks_and_finds_the_same_rows(tmp_path: Path, spark: SparkSession,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    table = keyed_table(tmp_path)
    files = [random_keys(ROWS_PER_FILE) for _ in range(FILES)]
    table = commit(table, [sink_file(table, keys, f"f{i}") for i, keys in enumerate(files)])
    touched = [keys[i] for keys in files for i in range(0, ROWS_PER_FILE, 97)] + random_keys(5)
    in_driver = LocateStats()
    expected = located(table, touched, FileKeysCache(), in_driver)
    assert expected == truth(table, set(touched)) and not in_driver.in_spark_tasks
    monkeypatch.setattr(locate, "DRIVER_LOCATE_ROWS", ROWS_PER_FILE)  # fewer rows than the candidates hold
    in_tasks = LocateStats()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    result = locate_rows(table, snapshot, pa.table({"key": touched}), FileKeysCache(), in_tasks, lambda: spark)
    assert {path: sorted(vector) for path, vector in result.items()} == expected
    assert in_tasks.in_spark_tasks and in_tasks.rows_read == FILES * ROWS_PER_FILE


def test_key_columns_kept_in_memory_locate_the_same_rows_and_the_driver_keeps_only_what_fits(
        tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    table = keyed_table(tmp_path)
    files = [random_keys(ROWS_PER_FILE) for _ in range(FILES)]
    table = commit(table, [sink_file(table, keys, f"f{i}") for i, keys in enumerate(files)])
    snapshot = table.current_snapshot()
    assert snapshot is not None
    touched = [keys[i] for keys in files for i in range(0, ROWS_PER_FILE, 97)] + random_keys(5)
    expected = truth(table, set(touched))

    def locate_with(key_columns: KeyColumnCache, stats: LocateStats, with_spark: bool = False) -> dict[str, list[int]]:
        result = locate_rows(table, snapshot, pa.table({"key": touched}), FileKeysCache(), stats,
                             (lambda: spark) if with_spark else None, key_columns)
        return {path: sorted(vector) for path, vector in result.items()}

    key_columns, first, second = KeyColumnCache(), LocateStats(), LocateStats()
    assert locate_with(key_columns, first) == expected and first.rows_read == FILES * ROWS_PER_FILE
    assert locate_with(key_columns, second) == expected  # data files never change: nothing read again
    assert (second.rows_read, second.rows_in_memory) == (0, FILES * ROWS_PER_FILE)

    monkeypatch.setattr(locate, "DRIVER_LOCATE_ROWS", ROWS_PER_FILE)  # fewer rows than the candidates hold
    one_file = KeyColumn.of(pq.read_table(next(iter(expected)).removeprefix("file://")).column(0)).nbytes
    small, cold = KeyColumnCache(max_bytes=3 * one_file + 100), LocateStats()  # room for three files' key columns
    assert locate_with(small, cold, with_spark=True) == expected  # it guessed 8 bytes a row: read all, kept three
    assert (cold.rows_read, cold.rows_in_memory, len(small)) == (FILES * ROWS_PER_FILE, 0, 3)
    for _ in range(2):  # then it keeps those three and leaves the others to the executors, every time
        warm = LocateStats()
        assert locate_with(small, warm, with_spark=True) == expected
        assert warm.in_spark_tasks and (warm.rows_in_memory, warm.rows_read_in_tasks) == (
            3 * ROWS_PER_FILE, (FILES - 3) * ROWS_PER_FILE)


def test_integer_keys_spread_over_many_files_are_located_from_memory(tmp_path: Path) -> None:
    catalog = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "warehouse").as_uri())
    catalog.create_namespace("ns")
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "value", LongType()),
                    identifier_field_ids=[1])
    table = catalog.create_table("ns.t", schema, properties={"format-version": "2"})
    plan = TablePlan(table.metadata.location, dict(table.properties), table.schema(), table.spec(), dict(table.io.properties))
    data_files = []
    for number in range(4):  # ids interleaved across files, so bounds prune nothing
        ids = list(range(number, 4 * ROWS_PER_FILE, 4))
        writer = PartitionedWriter(plan, f"isync-test-{number}", 1 << 30, 1 << 26)
        writer.write(conform(pa.RecordBatch.from_pydict({"id": ids, "value": ids}), plan.arrow_schema()))
        data_files += writer.finish()
    transaction = Transaction(table)
    internals.row_delta(transaction, {"test": "1"}, data_files, [], [])
    internals.commit_transaction(catalog, table, transaction)
    table = catalog.load_table("ns.t")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    touched = [*range(0, 4 * ROWS_PER_FILE, 7), -1, 10**12]
    key_columns = KeyColumnCache()
    for _ in range(2):
        stats = LocateStats()
        result = locate_rows(table, snapshot, pa.table({"id": pa.array(touched, pa.int64())}), FileKeysCache(), stats,
                             key_columns=key_columns)
        by_file = {f.file_path: number for number, f in enumerate(data_files)}
        assert {path: sorted(vector) for path, vector in result.items()} == {
            f.file_path: [i for i in range(ROWS_PER_FILE) if (4 * i + by_file[f.file_path]) % 7 == 0] for f in data_files}
    assert (stats.rows_read, stats.rows_in_memory) == (0, 4 * ROWS_PER_FILE)
