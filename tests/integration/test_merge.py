"""Merging a trigger's small staged files on real Spark (spark_app/staging/packing.py): the rows, the files, the fallback."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
from pyspark.sql import SparkSession

from spark_app.staging import packing
from spark_app.staging.packing import merge_small_files
from spark_app.staging.writer import (
    StagedFile,
    TablePlan,
    TaskResult,
    WritePlan,
    data_file_from_footer,
    stage_partition,
)
from tests.infra.services import S3Server

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "kind", StringType()))
KINDS = ("a", "b", "c")


@pytest.fixture(params=["in the driver", "by a Spark job"])
def merging_where(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a merge runs: small merges in the driver, larger ones as a Spark job."""
    if request.param == "by a Spark job":
        monkeypatch.setattr(packing, "DRIVER_MERGE_BYTES", 0)
    return str(request.param)


def write_plan(tmp_path: Path, location: str | None = None, io_properties: dict[str, str] | None = None) -> WritePlan:
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "kind"))
    table = TablePlan(location=location or tmp_path.as_uri(), properties={}, schema=SCHEMA, spec=spec,
                      io_properties=io_properties or {})
    return WritePlan(sink_id="test/merge", sink_version=1, file_prefix="isync-test-v1-0", table=table,
                     dead_letter=None, target_file_bytes=8 << 20, writer_memory_bytes=64 << 20,
                     required_columns=("id",), event_time_column=None)


def staged_by_two_tasks(plan: WritePlan) -> list[TaskResult]:
    """Two tasks' results, each holding rows of every kind: six small files."""
    results = []
    for task, ids in enumerate((range(0, 3_000), range(3_000, 6_000))):
        batch = pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()),
                                            "kind": [KINDS[i % 3] for i in ids]})
        results.append(stage_partition(plan, iter([batch]), f"{task:05d}-0"))
    return results


def local(data_file: DataFile) -> str:
    return data_file.file_path.removeprefix("file://")


def rows_of(files: list[StagedFile]) -> dict[str, list[int]]:
    by_kind: dict[str, list[int]] = {}
    for staged in files:
        content = pq.read_table(staged.data_file.file_path.removeprefix("file://"))
        assert content.num_rows == staged.data_file.record_count
        (kind,) = staged.data_file.partition
        assert set(content.column("kind").to_pylist()) == {kind}
        by_kind.setdefault(kind, []).extend(content.column("id").to_pylist())
    return {kind: sorted(ids) for kind, ids in by_kind.items()}


def test_merging_leaves_one_file_per_partition_with_the_same_rows(tmp_path: Path, spark: SparkSession,
                                                                  merging_where: str) -> None:
    plan = write_plan(tmp_path)
    results = staged_by_two_tasks(plan)
    originals = [s for r in results for s in r.files]
    assert len(originals) == 6

    merged = merge_small_files(spark, plan, results)

    files = [s for r in merged for s in r.files]
    assert sorted(tuple(s.data_file.partition) for s in files) == [("a",), ("b",), ("c",)]
    assert rows_of(files) == {kind: [i for i in range(6_000) if KINDS[i % 3] == kind] for kind in KINDS}
    assert sum(r.records for r in merged) == 6_000  # the originals' results still count the rows
    assert not any(Path(s.data_file.file_path.removeprefix("file://")).exists() for s in originals)
    assert all(s.data_file.file_path.rsplit("/", 1)[-1].startswith("isync-test-v1-0-m") for s in files)


def test_a_group_that_fails_to_merge_is_committed_unmerged_and_the_others_still_merge(
        tmp_path: Path, spark: SparkSession, merging_where: str) -> None:
    plan = write_plan(tmp_path)
    results = staged_by_two_tasks(plan)
    broken = next(s for s in results[1].files if tuple(s.data_file.partition) == ("b",))
    Path(broken.data_file.file_path.removeprefix("file://")).write_bytes(b"not parquet")

    merged = merge_small_files(spark, plan, results)

    files = [s for r in merged for s in r.files]
    by_kind: dict[str, list[str]] = {}
    for staged in files:
        by_kind.setdefault(staged.data_file.partition[0], []).append(staged.data_file.file_path)
    assert {kind: len(paths) for kind, paths in by_kind.items()} == {"a": 1, "b": 2, "c": 1}
    assert broken.data_file.file_path in by_kind["b"]  # kept, as staged
    assert all(Path(p.removeprefix("file://")).exists() for paths in by_kind.values() for p in paths)
    # The failed group's partial output was deleted: b's only files are the originals.
    assert not any("-m" in p.rsplit("/", 1)[-1] for p in by_kind["b"])
    assert len(list((tmp_path / "data").rglob("*.parquet"))) == 4


def test_large_files_are_merged_by_copying_their_row_groups(tmp_path: Path, spark: SparkSession,
                                                            merging_where: str) -> None:
    """Files whose row groups are not tiny are joined without re-encoding: the merged file holds the
    originals' row groups, statistics and all, and tiny files of the same partition become one more
    row group written again."""
    plan = write_plan(tmp_path)
    random_ids = np.random.default_rng(7).integers(0, 2**62, 3 * 200_000)  # incompressible: ~1.6 MB a file
    results = [stage_partition(plan, iter([pa.RecordBatch.from_pydict(
        {"id": pa.array(ids, pa.int64()), "kind": ["a"] * len(ids)})]), f"{task:05d}-0")
        for task, ids in enumerate(np.split(random_ids, 3))]
    tiny = [stage_partition(plan, iter([pa.RecordBatch.from_pydict({"id": [task], "kind": ["a"]})]), f"{task:05d}-0")
            for task in (3, 4)]
    originals = [s.data_file for r in results for s in r.files]
    assert all(f.file_size_in_bytes / len(f.split_offsets or ()) >= packing.MIN_COPIED_ROW_GROUP_BYTES for f in originals)
    statistics = {f.file_path: [pq.ParquetFile(local(f)).metadata.row_group(g).column(0).statistics.min
                                for g in range(len(f.split_offsets or ()))] for f in originals}

    merged = merge_small_files(spark, plan, results + tiny)

    (single,) = [s.data_file for r in merged for s in r.files]
    metadata = pq.ParquetFile(local(single)).metadata
    copied = [metadata.row_group(g).column(0).statistics.min for g in range(metadata.num_row_groups)]
    copied_groups, written_again = copied[:-1], copied[-1]
    assert sorted(copied_groups) == sorted(m for mins in statistics.values() for m in mins)
    assert written_again == 3  # both tiny files' rows (ids 3 and 4), one row group
    assert metadata.row_group(metadata.num_row_groups - 1).num_rows == 2
    ids = pq.read_table(local(single)).column("id").to_pylist()
    assert sorted(ids) == sorted([*random_ids.tolist(), 3, 4])
    assert single.record_count == 600_002
    assert len(single.split_offsets or ()) == metadata.num_row_groups
    assert single.file_size_in_bytes == Path(local(single)).stat().st_size


def test_files_that_cannot_be_copied_are_merged_by_writing_their_rows_again(
        tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A staged file with an offset index (absolute page offsets a copy would break) is refused by the
    row-group copy; that group is written again, the others are copied, and the rows are the same."""
    monkeypatch.setattr(packing, "MIN_COPIED_ROW_GROUP_BYTES", 0)  # copy even these small files (in the driver)
    plan = write_plan(tmp_path)
    results = staged_by_two_tasks(plan)
    indexed = next(s for s in results[1].files if tuple(s.data_file.partition) == ("b",))
    path = local(indexed.data_file)
    pq.write_table(pq.read_table(path), path, write_page_index=True)
    indexed.data_file = data_file_from_footer(plan.table, indexed.data_file.file_path, Path(path).stat().st_size,
                                              indexed.data_file.partition, pq.read_metadata(path))

    with caplog.at_level(logging.INFO, logger="icebergsync.merge"):
        merged = merge_small_files(spark, plan, results)

    files = [s for r in merged for s in r.files]
    assert rows_of(files) == {kind: [i for i in range(6_000) if KINDS[i % 3] == kind] for kind in KINDS}
    row_groups = {s.data_file.partition[0]: pq.read_metadata(local(s.data_file)).num_row_groups for s in files}
    assert row_groups == {"a": 2, "b": 1, "c": 2}  # a and c: both tasks' row groups copied; b: written again
    assert "instead of copying them: the file has an offset index" in caplog.text


def test_row_groups_are_copied_between_files_on_s3(tmp_path: Path, spark: SparkSession, s3_server: S3Server) -> None:
    """The copy reads the staged files with ranged reads and writes the merged one through the table's
    FileIO on an S3 store (MinIO), as a sync with its warehouse on S3 does."""
    plan = write_plan(tmp_path, f"s3://{s3_server.bucket}/merge-test", s3_server.fileio_properties)
    random_ids = np.random.default_rng(11).integers(0, 2**62, 2 * 200_000)
    results = [stage_partition(plan, iter([pa.RecordBatch.from_pydict(
        {"id": pa.array(ids, pa.int64()), "kind": ["a"] * len(ids)})]), f"{task:05d}-0")
        for task, ids in enumerate(np.split(random_ids, 2))]
    originals = [s.data_file for r in results for s in r.files]

    merged = merge_small_files(spark, plan, results)

    (single,) = [s.data_file for r in merged for s in r.files]
    filesystem = s3_server.filesystem()
    with filesystem.open_input_file(single.file_path.removeprefix("s3://")) as stream:
        content = pq.ParquetFile(stream)
        assert content.metadata.num_row_groups == sum(len(f.split_offsets or ()) for f in originals)
        assert sorted(content.read().column("id").to_pylist()) == sorted(random_ids.tolist())
    assert single.file_size_in_bytes == filesystem.get_file_info(single.file_path.removeprefix("s3://")).size
    assert all(filesystem.get_file_info(f.file_path.removeprefix("s3://")).type.name == "NotFound" for f in originals)


def test_small_files_too_large_to_join_in_memory_are_written_again_through_the_rolling_writer(
        tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The tiny files of a group become one row group built in memory, up to a bound; past it the group
    is written again by the rolling writer (memory bounded by its row-group budget), rows unchanged."""
    monkeypatch.setattr(packing, "MAX_REWRITTEN_PIECE_BYTES", 1)
    plan = write_plan(tmp_path)

    with caplog.at_level(logging.INFO, logger="icebergsync.merge"):
        merged = merge_small_files(spark, plan, staged_by_two_tasks(plan))

    files = [s for r in merged for s in r.files]
    assert rows_of(files) == {kind: [i for i in range(6_000) if KINDS[i % 3] == kind] for kind in KINDS}
    assert len(files) == 3
    assert caplog.text.count("hold more than 1 bytes to join in memory") == 3
