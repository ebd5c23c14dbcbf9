"""Which files one upkeep run rewrites, planned on the live files of one main snapshot (no I/O here).

- **Compaction**: per partition, a data file below ``compaction.smallFilePercent`` of the target size is
  small. Small files merge by size tier (RocksDB's universal compaction's size ratio): smallest first,
  the longest run of them whose largest is at most :data:`SIZE_RATIO` times the others together (the
  partition's files due for deletes among them), each file counted as at least ``tier_floor_bytes``
  (:data:`TIER_FLOOR_BYTES`, the floor of Cassandra's size-tiered compaction: the files of a partition of
  a MiB or less all merge). A file near the target is never rewritten to absorb a few small ones, and
  above the floor every compacted row lands in a file at least 1 + 1 / ``SIZE_RATIO`` times as large: a
  row is rewritten by compaction at most about log(target / floor) / log(1.25) times beyond the floor's,
  however many commits add files. Once ``compaction.minInputFiles`` files of a partition would merge,
  or when files of the partition are rewritten for their deletes anyway, the chosen files are packed
  first-fit decreasing into groups of at most the target size, each written again as one file (a group
  of one small file is left alone). Read cost, table-wide: once the files packing every partition's
  small files would save (small files less groups) number at least ``compaction.minInputFiles`` and
  exceed ``compaction.maxExtraFilesPercent`` of the data files packing would leave, every partition
  where two or more files would merge is compacted.
- **Deletes**: a data file is due when at least ``rewriteDeletes.minDeleteFiles`` of the sink's
  equality delete files apply to it, or position deletes (files, or a format-3 deletion vector) remove
  at least ``rewriteDeletes.deletedRowsPercent`` of its rows; it is written again without those rows
  (packed with its partition's other candidates). A partition where a data file that stays has two
  or more position deletes gets them merged: into one position delete file (format 2), into one DV
  per data file (format 3).
- **Layout**: after a partition-spec evolution (``spark_app/commit/partition_evolution.py``), a data file of an earlier spec
  is due (with compaction on): it is written again in the default spec's layout, its rows spread over the
  new partitions, packed with the other files of its old partition.
- Whatever made a file a candidate, every delete that applies to it is applied when it is written
  again: the replacement takes the planned snapshot's data sequence number, to which those deletes
  no longer apply. The delete files that apply to no data file that stays are removed, each DV on
  its own (:attr:`~spark_app.iceberg.internals.LiveFile.key`): the DVs of rewritten data files go,
  those of the other data files of the same Puffin file stay as they are.
- **Never touched**: data files another writer's equality deletes apply to (partitioned ones, or on
  other columns than the key), and those deletes.
- **Bounds**: groups are taken in order, those due for deletes first (oldest data first, so that
  deletes can go), then those of the partitions with most small files, while they fit
  ``maxBytesPerRun`` and ``maxFilesPerRun`` (a group never holds more files than that); the first
  group is always taken, so that every run makes progress.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import DataFileContent
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table.snapshots import Snapshot

from spark_app.iceberg.internals import FileKey, LiveFile
from spark_app.staging.packing import first_fit_decreasing

PartitionKey = tuple[int, Any]  # (spec id, partition value): files of two specs are never one partition


def partition_of(live: LiveFile) -> PartitionKey:
    return live.data_file.spec_id, live.data_file.partition


def _size(live: LiveFile) -> int:
    return live.data_file.file_size_in_bytes


def _path(live: LiveFile) -> str:
    return live.path


@dataclass(frozen=True)
class Thresholds:
    """``spec.maintenance`` as the planner applies it (sizes in bytes); None turns a part off."""

    target_file_bytes: int
    small_file_bytes: int | None
    min_input_files: int
    min_delete_files: int | None
    deleted_rows_share: float
    max_bytes: int
    max_files: int
    extra_files_share: float | None = None  # the read-cost budget (maxExtraFilesPercent / 100); None: off
    tier_floor_bytes: int = 0  # files smaller count as this large when merging by size tier (TIER_FLOOR_BYTES)


@dataclass(frozen=True)
class RewriteGroup:
    """Data files of one partition written again together, with every delete file that applies to one of them."""

    files: tuple[LiveFile, ...]
    equality_deletes: tuple[LiveFile, ...]
    position_deletes: tuple[LiveFile, ...]
    due_to_deletes: bool  # else compacted for being small

    @property
    def size(self) -> int:
        return sum(map(_size, self.files))

    @property
    def spec_id(self) -> int:
        return self.files[0].data_file.spec_id


@dataclass(frozen=True)
class PositionMerge:
    """A partition's position delete files that still apply, replaced by one file holding their positions in
    ``targets`` (the data files of the partition they apply to, none of them rewritten)."""

    deletes: tuple[LiveFile, ...]
    targets: tuple[LiveFile, ...]

    @property
    def size(self) -> int:
        return sum(map(_size, self.deletes))


@dataclass(frozen=True)
class UpkeepPlan:
    """One run: planned on ``snapshot``, its rewrites, position delete merges and delete files that go."""

    snapshot: Snapshot
    groups: tuple[RewriteGroup, ...]
    merges: tuple[PositionMerge, ...]
    removable: tuple[LiveFile, ...]  # delete files applying to no data file that stays: removed, nothing written
    deferred: int = 0  # candidate groups the bounds left for a later run

    @property
    def rewritten(self) -> list[LiveFile]:
        return [f for group in self.groups for f in group.files]


def _ours(delete: LiveFile, key_ids: list[int], specs: Mapping[int, PartitionSpec]) -> bool:
    """The sink's kind of equality delete: on the key, under an unpartitioned spec (it applies to every partition)."""
    return bool(key_ids) and not specs[delete.data_file.spec_id].fields \
        and sorted(delete.data_file.equality_ids or []) == key_ids


def _applies(delete: LiveFile, data: LiveFile, specs: Mapping[int, PartitionSpec]) -> bool:
    """Whether an equality delete applies to a data file (by sequence number and partition, whatever it names)."""
    return delete.data_sequence_number > data.data_sequence_number and (
        not specs[delete.data_file.spec_id].fields or partition_of(delete) == partition_of(data))


def _position_deletes_by_data_file(data: Sequence[LiveFile], positions: Sequence[LiveFile],
                                   references: Mapping[FileKey, Mapping[str, int]]) -> dict[str, list[LiveFile]]:
    """Data file path -> the position delete files that apply to it (same partition, sequence number at least
    the file's, naming its path)."""
    by_path = {f.path: f for f in data}
    applying: dict[str, list[LiveFile]] = {}
    for delete in positions:
        for path in references[delete.key]:
            target = by_path.get(path)
            if target is not None and partition_of(target) == partition_of(delete) \
                    and delete.data_sequence_number >= target.data_sequence_number:
                applying.setdefault(path, []).append(delete)
    return applying


def _over_budget(small_files: Iterable[list[LiveFile]], data_files: int, thresholds: Thresholds) -> bool:
    """Whether the data files packing every partition's ``small_files`` would save exceed the read-cost budget
    (``extra_files_share`` of the ``data_files`` it would leave) and number at least ``min_input_files``: a
    table of a few files is not rewritten for one more (each such rewrite would copy its small files again)."""
    if thresholds.extra_files_share is None:
        return False
    extra = sum(len(small) - len(first_fit_decreasing(small, _size, thresholds.target_file_bytes, _path))
                for small in small_files)
    return extra >= max(1, thresholds.min_input_files) and extra > thresholds.extra_files_share * (data_files - extra)


SIZE_RATIO = 4  # a small file merges only with files of at least a quarter of its size together
TIER_FLOOR_BYTES = 256 * 1024  # opening a file costs a scan about as much as reading this much of it


def _tiered(small: list[LiveFile], chosen_bytes: int, floor: int) -> list[LiveFile]:
    """The small files that merge with files of ``chosen_bytes`` in all: the longest run of them, smallest first, whose
    largest is at most ``SIZE_RATIO`` times the others together (``chosen_bytes`` among them), each file counted
    as at least ``floor`` bytes."""
    ordered = sorted(small, key=lambda f: (_size(f), f.path))
    joining = 0
    for count, live in enumerate(ordered, 1):
        if max(_size(live), floor) <= SIZE_RATIO * chosen_bytes:
            joining = count
        chosen_bytes += max(_size(live), floor)
    return ordered[:joining]


def _candidate_bins(data: Sequence[LiveFile], due: set[str], pinned: set[str], thresholds: Thresholds) -> list[list[LiveFile]]:
    """Per partition, the files due for deletes and the small ones that merge with them by size tier (once enough
    would, or the read-cost budget is exceeded), packed."""
    by_partition: dict[PartitionKey, list[LiveFile]] = {}
    for live in data:
        if live.path not in pinned:
            by_partition.setdefault(partition_of(live), []).append(live)
    limit = thresholds.small_file_bytes
    small_of = {partition: [f for f in files if limit is not None and _size(f) < limit]
                for partition, files in by_partition.items()}
    over_budget = _over_budget(small_of.values(), sum(map(len, by_partition.values())), thresholds)
    bins: list[list[LiveFile]] = []
    for partition, files in by_partition.items():
        due_files = [f for f in files if f.path in due]
        due_bytes = sum(max(_size(f), thresholds.tier_floor_bytes) for f in due_files)
        small = _tiered([f for f in small_of[partition] if f.path not in due], due_bytes, thresholds.tier_floor_bytes)
        if not due_files and len(small) < (2 if over_budget else thresholds.min_input_files):
            small = []  # not enough to be worth a rewrite of their own
        for packed in first_fit_decreasing([*due_files, *small], _size, thresholds.target_file_bytes, _path):
            for start in range(0, len(packed), thresholds.max_files):
                part = packed[start:start + thresholds.max_files]
                if len(part) > 1 or part[0].path in due:
                    bins.append(part)
    return bins


def _bounded(bins: list[list[LiveFile]], due: set[str], thresholds: Thresholds) -> tuple[list[list[LiveFile]], int]:
    """The bins one run takes (in priority order, within the bounds; the first always) and how many it leaves."""
    def priority(files: list[LiveFile]) -> tuple[int, int, str]:
        if any(f.path in due for f in files):
            return 0, min(f.data_sequence_number for f in files), min(map(_path, files))
        return 1, -len(files), min(map(_path, files))

    taken: list[list[LiveFile]] = []
    size = count = 0
    for files in sorted(bins, key=priority):
        grown = size + sum(map(_size, files))
        if taken and (grown > thresholds.max_bytes or count + len(files) > thresholds.max_files):
            continue
        taken.append(files)
        size, count = grown, count + len(files)
    return taken, len(bins) - len(taken)


def plan_upkeep(snapshot: Snapshot, files: Sequence[LiveFile], thresholds: Thresholds, key_ids: Sequence[int],
                specs: Mapping[int, PartitionSpec], references: Mapping[FileKey, Mapping[str, int]],
                default_spec_id: int | None = None) -> UpkeepPlan | None:
    """The run due on ``snapshot`` whose live files are ``files``, or None when nothing is due.

    ``key_ids`` are the table's identifier field ids, ``specs`` its partition specs by id, and
    ``references`` maps each live position delete file's or DV's :attr:`~LiveFile.key` to the data file
    paths it names and how many positions it deletes in each. With ``default_spec_id``, data files of
    other specs are due for the default spec's layout (when compaction is on).
    """
    data = [f for f in files if f.data_file.content == DataFileContent.DATA]
    positions = [f for f in files if f.data_file.content == DataFileContent.POSITION_DELETES]
    equality = [f for f in files if f.data_file.content == DataFileContent.EQUALITY_DELETES]
    keys = sorted(key_ids)
    ours = [d for d in equality if _ours(d, keys, specs)]
    foreign = [d for d in equality if not _ours(d, keys, specs)]
    our_sequences = sorted(d.data_sequence_number for d in ours)
    by_data_file = _position_deletes_by_data_file(data, positions, references)

    pinned = {f.path for f in data if any(_applies(d, f, specs) for d in foreign)}
    due: set[str] = set()
    if thresholds.min_delete_files is not None:
        for live in data:
            equality_files = len(our_sequences) - bisect.bisect_right(our_sequences, live.data_sequence_number)
            deleted = sum(references[d.key][live.path] for d in by_data_file.get(live.path, []))
            rows = live.data_file.record_count
            if live.path not in pinned and (equality_files >= thresholds.min_delete_files
                                            or (rows > 0 and deleted >= thresholds.deleted_rows_share * rows)):
                due.add(live.path)
    relayout = {f.path for f in data if f.data_file.spec_id != default_spec_id and f.path not in pinned} \
        if default_spec_id is not None and thresholds.small_file_bytes is not None else set()
    taken, deferred = _bounded(_candidate_bins(data, due | relayout, pinned, thresholds), due | relayout, thresholds)

    groups = []
    for bin_files in taken:
        oldest = min(f.data_sequence_number for f in bin_files)
        named = {d.key: d for f in bin_files for d in by_data_file.get(f.path, [])}
        groups.append(RewriteGroup(tuple(sorted(bin_files, key=_path)),
                                   tuple(d for d in ours if d.data_sequence_number > oldest),
                                   tuple(named[key] for key in sorted(named)),
                                   any(f.path in due for f in bin_files)))
    rewritten = {f.path for group in groups for f in group.files}
    staying = [f for f in data if f.path not in rewritten]
    lowest_staying = min((f.data_sequence_number for f in staying), default=None)
    removable = [d for d in ours if lowest_staying is None or lowest_staying >= d.data_sequence_number]

    still_applying = _position_deletes_by_data_file(staying, positions, references)
    live_positions: dict[PartitionKey, dict[FileKey, LiveFile]] = {}
    for deletes_of_file in still_applying.values():
        for delete in deletes_of_file:
            live_positions.setdefault(partition_of(delete), {})[delete.key] = delete
    removable += [d for d in positions if d.key not in live_positions.get(partition_of(d), {})]
    merges = []
    if thresholds.min_delete_files is not None:
        for partition, deletes in sorted(live_positions.items(), key=lambda item: min(item[1])):
            targets = [f for f in staying if partition_of(f) == partition and f.path in still_applying]
            if max(len(still_applying[f.path]) for f in targets) > 1:
                merges.append(PositionMerge(tuple(deletes[key] for key in sorted(deletes)),
                                            tuple(sorted(targets, key=_path))))
    if not groups and not merges and not removable:
        return None
    return UpkeepPlan(snapshot, tuple(groups), tuple(merges), tuple(removable), deferred)
