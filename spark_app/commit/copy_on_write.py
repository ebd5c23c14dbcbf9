"""Copy-on-write of small data files in a keyed commit, instead of position deletes.

A keyed commit deletes the older rows of the keys it touches by position (:mod:`.stage`). For a small
data file that is a poor trade: the partition is left with the file, a position delete file or DV and
the trigger's own small file of new rows, three files to open where one would do, until upkeep
compacts them. So, on the head the commit swaps against, every partition holding a touched data file
smaller than ``changes.copyOnWriteBelow`` (or new rows of the trigger and such a file) is written
again as ONE data file: the live rows of its small files (without the rows the trigger deletes and
without every position delete or DV that already applies to them) followed by the trigger's staged
rows of that partition. The commit's one snapshot removes the small files, the staged files merged
and the delete files left with nothing to delete (the DVs of the removed files; a format 2 position
delete file naming only removed files), and adds the merged file; only larger files get position
deletes.

A file any equality delete applies to is never written this way (the merged file's sequence number
is the commit's, past those deletes). On format 3 the old rows keep their row lineage, written as
the ``_row_id`` and ``_last_updated_sequence_number`` columns (:mod:`spark_app.staging.lineage`); the
trigger's rows have none and so get the merged file's (new ids, the commit's sequence number).
The work is bounded: inputs of at most twice the threshold per partition and
:data:`spark_app.staging.packing.DRIVER_REWRITE_BYTES` per commit (the rest gets position deletes), in the driver.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table

from spark_app.iceberg.applied_deletes import applied_positions, named_positions
from spark_app.iceberg.internals import LiveFile, live_files, read_data_file
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector
from spark_app.staging.packing import DRIVER_REWRITE_BYTES
from spark_app.staging.rewrite_rows import RewriteContext, write_live_rows
from spark_app.staging.writer import RollingParquetWriter, compression_options, conform

PartitionKey = tuple[int, object]


@dataclass
class CopyOnWrite:
    """What a commit's copy-on-write changes: the files it adds and removes, and the located rows it leaves to
    position deletes (those of the files it does not write again)."""

    located: dict[str, DeletionVector]
    added: list[DataFile] = field(default_factory=list)  # the merged files
    removed_data: list[DataFile] = field(default_factory=list)  # the small live files written again
    removed_deletes: list[DataFile] = field(default_factory=list)  # delete files left with nothing to delete
    replaced_staged: list[DataFile] = field(default_factory=list)  # the trigger's staged files merged

    @property
    def rows_rewritten(self) -> int:
        return sum(f.record_count for f in self.removed_data)


def _key(data_file: DataFile) -> PartitionKey:
    return data_file.spec_id, data_file.partition


def _size(data_file: DataFile) -> int:
    return data_file.file_size_in_bytes


@dataclass(frozen=True)
class _Choice:
    """One partition written again: its small live files picked, the trigger's staged files of it, and the
    partition's position delete files and DVs."""

    partition: PartitionKey
    picked: list[LiveFile]
    new: list[DataFile]
    deletes: list[LiveFile]


def copy_on_write(table: Table, located: Mapping[str, DeletionVector], staged: Sequence[DataFile], below_bytes: int,
                  name_prefix: str, manifests: MutableMapping[str, list[LiveFile]] | None = None,
                  budget_bytes: int = DRIVER_REWRITE_BYTES) -> CopyOnWrite:
    """Write again the small files of ``table``'s current snapshot that ``located`` (data file path -> positions
    the trigger deletes) touches, with the trigger's ``staged`` data files of their partitions; see the module.

    ``manifests`` caches live files by manifest path. Nothing is written when ``below_bytes`` is 0.
    """
    result = CopyOnWrite(dict(located))
    snapshot = table.current_snapshot()
    if below_bytes <= 0 or snapshot is None or table.metadata.format_version < 2:
        return result
    live = live_files(table, snapshot, manifests)
    chosen = _choose(live, located, staged, below_bytes, table.metadata.default_spec_id, budget_bytes)
    if not chosen:
        return result
    context = RewriteContext.of(table, 8 * below_bytes)
    io = context.io()
    try:
        for choice in chosen:
            _write_again(context, io, choice, result, name_prefix)
    except BaseException:
        for written in result.added:
            with contextlib.suppress(FileNotFoundError):
                io.delete(written.file_path)
        raise
    return result


def _choose(live: Sequence[LiveFile], located: Mapping[str, DeletionVector], staged: Sequence[DataFile],
            below_bytes: int, default_spec: int, budget_bytes: int) -> list[_Choice]:
    """The partitions to write again: each holds a small file the trigger deletes rows of, or new rows of the
    trigger and a small file; its inputs stay within twice ``below_bytes``, and all within ``budget_bytes``."""
    equality = [f for f in live if f.data_file.content == DataFileContent.EQUALITY_DELETES]
    small_by_partition: dict[PartitionKey, list[LiveFile]] = {}
    deletes_by_partition: dict[PartitionKey, list[LiveFile]] = {}
    for f in live:
        if f.data_file.content == DataFileContent.POSITION_DELETES:
            deletes_by_partition.setdefault(_key(f.data_file), []).append(f)
        elif f.data_file.content == DataFileContent.DATA and _size(f.data_file) < below_bytes and not any(
                d.data_sequence_number > f.data_sequence_number for d in equality):
            small_by_partition.setdefault(_key(f.data_file), []).append(f)
    staged_by_partition: dict[PartitionKey, list[DataFile]] = {}
    for s in staged:
        if s.content == DataFileContent.DATA and s.spec_id == default_spec and _size(s) < below_bytes:
            staged_by_partition.setdefault(_key(s), []).append(s)

    touched = {p for p in located if located[p].cardinality}
    budget = budget_bytes
    chosen: list[_Choice] = []
    for partition, small in small_by_partition.items():
        new = staged_by_partition.get(partition, [])
        total = sum(map(_size, new))
        picked: list[LiveFile] = []
        for f in sorted(small, key=lambda f: (f.path not in touched, _size(f.data_file), f.path)):
            if total + _size(f.data_file) <= 2 * below_bytes:
                picked.append(f)
                total += _size(f.data_file)
        if not picked or (not new and not any(f.path in touched for f in picked)) or total > budget:
            continue  # nothing of this trigger's lands here, or no room for it
        budget -= total
        chosen.append(_Choice(partition, picked, new, deletes_by_partition.get(partition, [])))
    return chosen


def _write_again(context: RewriteContext, io: FileIO, choice: _Choice, result: CopyOnWrite, name_prefix: str) -> None:
    """Write ``choice``'s partition as one file (rows of its picked files less every delete, then the staged
    rows) and record in ``result`` what that adds and removes."""
    spec_id = choice.partition[0]
    named = named_positions(io, choice.deletes)  # read once: for the rows they delete, then for what they name
    applied = applied_positions(named, choice.picked)
    plan = context.table_plan(spec_id)
    target = plan.arrow_schema()
    writer = RollingParquetWriter(plan, io, choice.picked[0].data_file.partition, name_prefix,
                                  context.target_file_bytes, compression_options(plan.properties))
    try:
        for f in choice.picked:
            parts = [applied[f.path]] if f.path in applied else []
            if f.path in result.located:
                parts.append(result.located[f.path].to_numpy())
            gone = np.unique(np.concatenate(parts)).astype(np.int64) if parts else None
            write_live_rows(context, io, writer, target, f, spec_id, gone)
        for s in choice.new:  # the trigger's rows: no lineage yet (the merged file gives them theirs)
            for batch in read_data_file(io, s, context.file_schema, context.specs[spec_id], context.format_version,
                                        context.name_mapping, None):
                for conformed in conform(pa.Table.from_batches([batch]), target).to_batches():
                    writer.write(conformed)
        result.added.extend(writer.finish())
    except BaseException:
        writer.abort()
        raise
    result.removed_data.extend(f.data_file for f in choice.picked)
    result.replaced_staged.extend(choice.new)
    for f in choice.picked:
        result.located.pop(f.path, None)
    removed = {f.path for f in choice.picked}  # a delete file names files of its own partition only
    result.removed_deletes.extend(delete.data_file for delete, by_path in named if by_path.keys() <= removed)
