"""Which files an upkeep run rewrites (spark_app/upkeep/plan.py): thresholds, deletes, partitions, bounds."""

from __future__ import annotations

import dataclasses
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import DayTransform
from pyiceberg.typedef import Record

from spark_app.iceberg.internals import FileKey, LiveFile, full_data_file
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
    """Two new small files in each of many partitions never reach minInputFiles anywhere; the table-wide budget
    (files packing would save against the files it would leave, at least minInputFiles of them) merges them
    all at once, each partition's by size tier."""
    fresh = [data(f"old{day}", 500, day) for day in range(16)]
    budget = dataclasses.replace(DEFAULTS, extra_files_share=0.25)
    four = [*fresh, *(data(f"new{day}", 50, day) for day in range(4))]
    assert plan(four, budget) is None  # 4 files to save against 16 left: within 25 %
    pairs = [*fresh, *(data(f"{name}{day}", 50, day) for day in range(3) for name in ("a", "b"))]
    assert groups(plan(pairs, budget)) == [[f"a{day}", f"b{day}"] for day in range(3)]  # old* are 5x as large: stay
    assert plan(pairs) is None  # without the budget: per partition only
    fives = [*fresh, *(data(f"new{day}", 50, day) for day in range(5))]
    assert plan(fives, budget) is None  # over budget, but one small file is not worth rewriting a larger one
    # A small table is not rewritten for one more file: fewer than minInputFiles to save, whatever the share.
    small = [data("old0", 300, 0), data("old1", 300, 1), *(data(f"{n}{day}", 50, day) for day in range(2) for n in "ab")]
    assert plan(small, budget) is None
    full = [data(f"full{day}", 900, day) for day in range(3)]
    assert plan([*full, *(data(f"n{day}", 50, day) for day in range(3))], budget) is None  # nothing small to pack with


def test_a_file_joins_a_compaction_only_with_smaller_files_of_a_quarter_of_its_size_together() -> None:
    tiny = [data(f"t{i}", 10) for i in range(5)]
    assert groups(plan([data("large", 700), *tiny])) == [["t0", "t1", "t2", "t3", "t4"]]  # never 700 for 50 more
    assert groups(plan([data("mid", 200), *tiny])) == [["mid", "t0", "t1", "t2", "t3", "t4"]]  # 200 <= 4 * 50
    # Below the floor a file counts as the floor: a partition of a few small files merges whole.
    assert groups(plan([data("large", 700), *tiny], tier_floor_bytes=100)) == [["large", "t0", "t1", "t2", "t3", "t4"]]
    due = [data("old", 100, sequence=1), delete("e", 2), data("new", 50, sequence=3), data("larger", 700, sequence=3)]
    assert groups(plan(due)) == [["new", "old"]]  # a rewrite for deletes takes along the small files its size allows


def test_commits_of_small_files_rewrite_each_row_a_logarithmic_number_of_times() -> None:
    """64 commits each add a file of 10 bytes to each of 4 partitions (the target is 1,000: every file stays small)
    under the read-cost budget, each plan applied as upkeep would. A compacted row lands in a file at least
    1 + 1 / SIZE_RATIO times as large, so it is rewritten at most log(64) / log(1.25) = 18.6 times (rewriting every
    partition after every commit: 63), compaction writes at most that many times the bytes committed, and a
    partition's files grow by 1 + SIZE_RATIO from one to the next: at most 1 + log(64) / log(5) = 3.6 of them."""
    budget = dataclasses.replace(DEFAULTS, extra_files_share=0.25)
    rewrites: dict[str, int] = {}  # file -> the most times one of its rows was rewritten
    live: list[LiveFile] = []
    committed = rewritten = 0
    for commit in range(64):
        for day in range(4):
            live.append(data(f"c{commit}-{day}", 10, day, sequence=commit + 1))
            rewrites[live[-1].path] = 0
            committed += 10
        result = plan_upkeep(HEAD, live, budget, KEY, SPECS, {})
        for number, group in enumerate(result.groups if result is not None else ()):
            merged = data(f"m{commit}-{number}", group.size, group.files[0].data_file.partition[0], commit + 1)
            rewrites[merged.path] = 1 + max(rewrites[f.path] for f in group.files)
            rewritten += group.size
            live = [f for f in live if f not in group.files] + [merged]
        assert max(sum(1 for f in live if f.data_file.partition[0] == day) for day in range(4)) <= 3
    assert max(rewrites[f.path] for f in live) <= 18
    assert rewritten <= 18 * committed


def test_files_of_an_earlier_spec_are_due_for_the_default_specs_layout() -> None:
    """After a partition-spec evolution every data file of an earlier spec is written again (even a large one, even
    alone) in the default spec's layout, unless compaction is off or another writer's deletes pin it; it is not
    counted as rewritten for deletes."""
    earlier = [data("old-big", 990, day=1, spec_id=0), data("old-a", 100, day=2, spec_id=0),
               data("old-b", 100, day=2, spec_id=0)]
    current = [data("new", 100, day=3, spec_id=2)]
    result = plan_upkeep(HEAD, [*earlier, *current], DEFAULTS, KEY, SPECS, {}, default_spec_id=2)
    assert groups(result) == [["old-a", "old-b"], ["old-big"]]
    assert result is not None and not any(group.due_to_deletes for group in result.groups)
    assert plan_upkeep(HEAD, [*earlier, *current], DEFAULTS, KEY, SPECS, {}) is None  # no default spec given
    off = dataclasses.replace(DEFAULTS, small_file_bytes=None)
    assert plan_upkeep(HEAD, [*earlier, *current], off, KEY, SPECS, {}, default_spec_id=2) is None
    foreign = delete("theirs", 5, day=1, equality_ids=[2])
    pinned = plan_upkeep(HEAD, [*earlier, *current, foreign], DEFAULTS, KEY, SPECS, {}, default_spec_id=2)
    assert groups(pinned) == [["old-a", "old-b"]]
