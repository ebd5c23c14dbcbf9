"""Which files an upkeep run rewrites (spark_app/upkeep/plan.py): thresholds, deletes, partitions, bounds."""

from __future__ import annotations

import dataclasses
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import DayTransform
from pyiceberg.typedef import Record

from spark_app.iceberg_internals import FileKey, LiveFile, full_data_file
from spark_app.upkeep.plan import Thresholds, UpkeepPlan, plan_upkeep

TARGET = 1000
DAY = PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=DayTransform(), name="ts_day"), spec_id=0)
SPECS = {0: DAY, 1: PartitionSpec(spec_id=1),
         2: PartitionSpec(PartitionField(source_id=3, field_id=1001, transform=DayTransform(), name="d2"), spec_id=2)}
KEY = [1]
HEAD = Snapshot(snapshot_id=99, sequence_number=50, timestamp_ms=0, manifest_list="/t/metadata/snap.avro")
# spec.maintenance's defaults: small below 75 %, 5 of them; 1 equality delete; 20 % of the rows deleted
DEFAULTS = Thresholds(TARGET, 750, 5, 1, 0.2, 10 * TARGET, 1000)


def data(name: str, size: int, day: int = 1, sequence: int = 1, rows: int = 100, spec_id: int = 0) -> LiveFile:
    data_file = DataFile.from_args(content=DataFileContent.DATA, file_path=f"/t/data/{name}.parquet",
                                   file_format=FileFormat.PARQUET, partition=Record(day), record_count=rows,
                                   file_size_in_bytes=size)
    data_file.spec_id = spec_id
    return LiveFile(data_file, sequence, "/t/metadata/m.avro")


def delete(name: str, sequence: int, content: DataFileContent = DataFileContent.EQUALITY_DELETES, day: int | None = None,
           equality_ids: list[int] | None = None) -> LiveFile:
    delete_file = DataFile.from_args(content=content, file_path=f"/t/data/{name}.parquet", file_format=FileFormat.PARQUET,
                                     partition=Record() if day is None else Record(day), record_count=1,
                                     file_size_in_bytes=10,
                                     equality_ids=(equality_ids or KEY) if content == DataFileContent.EQUALITY_DELETES else None)
    delete_file.spec_id = 1 if day is None else 0
    return LiveFile(delete_file, sequence, "/t/metadata/d.avro")


def position(name: str, sequence: int, day: int = 1) -> LiveFile:
    return delete(name, sequence, DataFileContent.POSITION_DELETES, day)


def dv(target: LiveFile, offset: int, sequence: int, rows: int) -> LiveFile:
    """The deletion vector of ``target`` at ``offset`` of the one Puffin file /t/data/dvs.puffin."""
    vector = full_data_file(content=DataFileContent.POSITION_DELETES, file_path="/t/data/dvs.puffin",
                            file_format=FileFormat.PUFFIN, partition=target.data_file.partition, record_count=rows,
                            file_size_in_bytes=500, referenced_data_file=target.path, content_offset=offset,
                            content_size_in_bytes=40)
    vector.spec_id = target.data_file.spec_id
    return LiveFile(vector, sequence, "/t/metadata/d.avro")


def plan(files: list[LiveFile], thresholds: Thresholds = DEFAULTS,
         references: dict[str, dict[str, int]] | dict[FileKey, dict[str, int]] | None = None,
         **changes: Any) -> UpkeepPlan | None:
    """The plan, with ``references`` by delete file path (a Parquet file) or by key (a DV)."""
    keyed = {(key, None) if isinstance(key, str) else key: named for key, named in (references or {}).items()}
    return plan_upkeep(HEAD, files, dataclasses.replace(thresholds, **changes), KEY, SPECS, keyed)


def names(files: Any) -> list[str]:
    return sorted(f.path.rsplit("/", 1)[-1].removesuffix(".parquet") for f in files)


def groups(result: UpkeepPlan | None) -> list[list[str]]:
    assert result is not None
    return sorted(names(group.files) for group in result.groups)


def test_small_files_are_compacted_once_enough_have_piled_up() -> None:
    four = [data(f"s{i}", 100) for i in range(4)]
    assert plan(four) is None  # 4 small files of a partition: not yet
    five = [*four, data("s4", 100), data("big", 900), data("full", 990)]
    assert groups(plan(five)) == [["s0", "s1", "s2", "s3", "s4"]]  # files at or above 75 % stay as they are
    packed = [data(f"p{i}", 400) for i in range(5)]  # packed into groups of at most the target, one file left alone
    assert groups(plan(packed)) == [["p0", "p1"], ["p2", "p3"]]
    assert plan(five, small_file_bytes=None) is None  # compaction off


def test_partitions_and_specs_are_never_mixed() -> None:
    files = [data(f"a{i}", 50, day=1) for i in range(5)] + [data(f"b{i}", 50, day=2) for i in range(4)]
    files += [data(f"c{i}", 50, day=1, spec_id=2) for i in range(5)]  # the same value, another spec
    assert groups(plan(files)) == [["a0", "a1", "a2", "a3", "a4"], ["c0", "c1", "c2", "c3", "c4"]]


def test_files_an_equality_delete_applies_to_are_due_and_each_group_applies_every_delete_it_needs() -> None:
    files = [data("old", 900, sequence=1), data("mid", 900, sequence=3), data("new", 900, sequence=5),
             delete("e2", 2), delete("e4", 4)]
    result = plan(files)
    assert result is not None and groups(result) == [["mid"], ["old"]]  # "new" is newer than every delete
    by_file = {names(g.files)[0]: names(g.equality_deletes) for g in result.groups}
    assert by_file == {"old": ["e2", "e4"], "mid": ["e4"]} and all(g.due_to_deletes for g in result.groups)
    assert names(result.removable) == ["e2", "e4"]  # "new" (sequence 5) stays: no delete applies to it
    assert groups(plan(files, min_delete_files=2)) == [["old"]]
    kept = plan(files, min_delete_files=2)
    assert kept is not None and names(kept.removable) == ["e2"]  # "mid" stays, older than e4
    assert plan(files, min_delete_files=None) is None  # rewriting deletes off (or held back by its spacing)


def test_a_partition_rewritten_for_its_deletes_takes_its_small_files_along() -> None:
    files = [data("old", 300, sequence=1), data("new", 200, sequence=3), data("other-day", 200, day=2, sequence=3),
             delete("e", 3)]
    result = plan(files)
    assert groups(result) == [["new", "old"]]  # "new" is not due (nor are 5 small), but joins the rewrite of day 1
    assert plan(files, small_file_bytes=None) is not None and groups(plan(files, small_file_bytes=None)) == [["old"]]


def test_compaction_applies_the_deletes_even_when_deletes_are_not_due() -> None:
    files = [data(f"s{i}", 100, sequence=1) for i in range(5)] + [delete("e", 2)]
    result = plan(files, min_delete_files=None)
    assert result is not None and groups(result) == [["s0", "s1", "s2", "s3", "s4"]]
    assert names(result.groups[0].equality_deletes) == ["e"] and not result.groups[0].due_to_deletes
    assert names(result.removable) == ["e"]


def test_position_deletes_make_a_file_due_by_the_share_of_rows_they_remove() -> None:
    files = [data("a", 900, rows=100), data("b", 900, rows=100), position("p", 2)]
    some = {"/t/data/p.parquet": {"/t/data/a.parquet": 19, "/t/data/b.parquet": 20}}
    result = plan(files, references=some)
    assert groups(result) == [["b"]] and result is not None and names(result.groups[0].position_deletes) == ["p"]
    assert result.merges == () and result.removable == ()  # p still applies to "a", which stays


def test_position_delete_files_of_a_partition_are_merged_when_a_file_has_two() -> None:
    files = [data("a", 900), data("b", 900), data("c", 900, day=2), position("p1", 2), position("p2", 3),
             position("p3", 3, day=2), position("dangling", 3)]
    references = {"/t/data/p1.parquet": {"/t/data/a.parquet": 1}, "/t/data/p2.parquet": {"/t/data/a.parquet": 1,
                  "/t/data/b.parquet": 1}, "/t/data/p3.parquet": {"/t/data/c.parquet": 1},
                  "/t/data/dangling.parquet": {"/t/data/gone.parquet": 5}}
    result = plan(files, references=references)
    assert result is not None and result.groups == ()
    assert [(names(m.deletes), names(m.targets)) for m in result.merges] == [(["p1", "p2"], ["a", "b"])]
    assert names(result.removable) == ["dangling"]
    without = plan(files, references=references, min_delete_files=None)  # held back: only what applies to nothing
    assert without is not None and without.merges == () and names(without.removable) == ["dangling"]


def test_deletion_vectors_of_one_puffin_file_go_one_by_one_with_their_data_files() -> None:
    """One Puffin file holds the DVs of small files s0..s4, of a file mostly deleted and of two files that stay:
    the DVs of the rewritten files are removable each on its own (by offset), the others stay."""
    small = [data(f"s{i}", 100, sequence=1) for i in range(5)]
    mostly, stays, other_day = data("mostly", 500, sequence=1), data("stays", 900, sequence=1), data("d2", 900, day=2)
    targets = [*small, mostly, stays, other_day]
    vectors = [dv(target, 4 + 40 * i, 3, 50 if target is mostly else 1) for i, target in enumerate(targets)]
    references = {v.key: {target.path: v.data_file.record_count} for v, target in zip(vectors, targets, strict=True)}
    result = plan([*targets, *vectors], references=references)
    assert result is not None and groups(result) == [["mostly", "s0", "s1", "s2", "s3", "s4"]]
    assert sorted(d.key for d in result.groups[0].position_deletes) == sorted(v.key for v in vectors[:6])
    assert sorted(d.key for d in result.removable) == sorted(v.key for v in vectors[:6])
    assert result.merges == ()  # one DV per data file: nothing to merge


def test_a_position_delete_older_than_a_data_file_does_not_apply_to_it() -> None:
    files = [data("a", 900, sequence=4), position("p", 3)]
    result = plan(files, references={"/t/data/p.parquet": {"/t/data/a.parquet": 90}})
    assert result is not None and result.groups == () and names(result.removable) == ["p"]


def test_another_writers_equality_deletes_pin_the_files_they_apply_to() -> None:
    files = [data(f"s{i}", 100, sequence=1) for i in range(5)] + [data(f"t{i}", 100, sequence=3) for i in range(5)]
    files += [delete("on-name", 2, equality_ids=[2]), delete("ours", 2)]
    result = plan(files)
    assert groups(result) == [["t0", "t1", "t2", "t3", "t4"]]  # s* are pinned by "on-name"; t* are newer than both
    assert result is not None and result.removable == ()  # "ours" still applies to the pinned s*
    partitioned = [*files[:5], delete("day-1", 2, day=1, equality_ids=[1])]  # a partitioned delete is another writer's
    assert plan(partitioned) is None


def test_bounds_take_deletes_first_oldest_first_and_always_one_group() -> None:
    files = [data("old", 600, sequence=1), data("newer", 600, sequence=3, day=2), delete("e", 5)]
    files += [data(f"s{i}", 100, day=3, sequence=6) for i in range(6)]
    result = plan(files, max_bytes=700)
    assert result is not None and groups(result) == [["old"]] and result.deferred == 2
    assert result.removable == ()  # "newer" stays, so "e" still applies
    assert groups(plan(files, max_bytes=10)) == [["old"]]  # the first group is always taken
    everything = plan(files, max_bytes=10_000)
    assert everything is not None and names(everything.removable) == ["e"]
    assert groups(everything) == [["newer"], ["old"], ["s0", "s1", "s2", "s3", "s4", "s5"]]
    capped = plan(files, max_files=4)  # a group never holds more files than a run may rewrite
    assert capped is not None and all(len(g.files) <= 4 for g in capped.groups) and capped.deferred > 0


def test_the_read_cost_budget_compacts_every_partition_once_the_files_to_save_exceed_their_share() -> None:
    """One new small file in each of many partitions never reaches minInputFiles anywhere; the table-wide budget
    (files packing would save against the files it would leave, at least minInputFiles of them) compacts them
    all at once."""
    fresh = [data(f"old{day}", 300, day) for day in range(16)]
    budget = dataclasses.replace(DEFAULTS, extra_files_share=0.25)
    four = [*fresh, *(data(f"new{day}", 50, day) for day in range(4))]
    assert plan(four, budget) is None  # 4 files to save against 16 left: within 25 %
    five = [*fresh, *(data(f"new{day}", 50, day) for day in range(5))]
    assert groups(plan(five, budget)) == [[f"new{day}", f"old{day}"] for day in range(5)]
    assert plan(five) is None  # without the budget: per partition only
    # A small table is not rewritten for one more file: fewer than minInputFiles to save, whatever the share.
    small = [data("old0", 300, 0), data("old1", 300, 1), *(data(f"new{day}", 50, day) for day in range(2))]
    assert plan(small, budget) is None
    full = [data(f"full{day}", 900, day) for day in range(3)]
    assert plan([*full, *(data(f"n{day}", 50, day) for day in range(3))], budget) is None  # nothing small to pack with
