"""Which staged files are merged before a commit, and how merge work is dealt to tasks (spark_app/staging/packing.py)."""

from __future__ import annotations

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from spark_app.staging.packing import MergeGroup, plan_merges, spread

TARGET = 100


def staged(name: str, size: int, day: int) -> DataFile:
    return DataFile.from_args(content=DataFileContent.DATA, file_path=f"/t/data/{name}.parquet",
                              file_format=FileFormat.PARQUET, partition=Record(day), record_count=1,
                              file_size_in_bytes=size)


def names(groups: list[MergeGroup]) -> list[list[str]]:
    return sorted(sorted(f.file_path.rsplit("/", 1)[-1].removesuffix(".parquet") for f in g.files) for g in groups)


def test_small_files_of_one_partition_are_packed_up_to_the_target() -> None:
    files = [staged("a1", 40, 1), staged("a2", 35, 1), staged("a3", 30, 1), staged("a4", 20, 1)]
    # First fit decreasing: 40+35+20 fit in 100, 30 stays alone (a group of one is not merged).
    assert names(plan_merges(files, TARGET)) == [["a1", "a2", "a4"]]


def test_files_of_different_partitions_are_never_merged() -> None:
    files = [staged("d1", 10, 1), staged("d2", 10, 2), staged("d3", 10, 3)]
    assert plan_merges(files, TARGET) == []
    files.append(staged("d2b", 10, 2))
    assert names(plan_merges(files, TARGET)) == [["d2", "d2b"]]


def test_full_files_are_left_alone() -> None:
    files = [staged("full1", 97, 1), staged("full2", 95, 1), staged("rest1", 30, 1), staged("rest2", 25, 1)]
    assert names(plan_merges(files, TARGET)) == [["rest1", "rest2"]]


def test_remainders_that_do_not_fit_one_file_together_stay_apart() -> None:
    # Together above the target: merging would still leave two files, so nothing is rewritten.
    assert plan_merges([staged("r1", 60, 1), staged("r2", 55, 1)], TARGET) == []


def test_merge_work_is_spread_over_the_tasks_by_bytes() -> None:
    groups = [MergeGroup((staged(f"g{i}", size, i), staged(f"h{i}", size, i))) for i, size in enumerate([40, 30, 20, 10])]
    tasks = spread(groups, 2)
    assert sorted(sum(g.size for g in task) for task in tasks) == [100, 100]
    assert len(spread(groups[:1], 8)) == 1  # never more tasks than groups
