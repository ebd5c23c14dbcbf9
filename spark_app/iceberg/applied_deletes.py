"""Reading the deletes that apply to a data file, and dropping what they delete from its rows.

- Equality deletes (the sink's: on the key, every partition): a delete applies to a data file when
  its data sequence number is greater than the file's; its keys are read with that number and a
  row goes when an applicable delete names its key.
- Position deletes (format 2 files of ``file_path``, ``pos``; format 3 deletion vectors, one blob
  of a Puffin file per data file): a delete applies to a data file of its partition whose data
  sequence number is at most its own, at the positions it holds for the file's path.
  :class:`PositionReferences` says, once per delete file or DV (told apart by
  :attr:`~spark_app.iceberg.internals.LiveFile.key`), which data files it names and how many
  positions each: what the planner weighs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableMapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile

from spark_app.iceberg.internals import FileKey, LiveFile, is_deletion_vector, referenced_data_file
from spark_app.iceberg.position_deletes.dv_files import read_deletion_vector

SEQUENCE_COLUMN = "__isync_delete_sequence"
_ROW_COLUMN = "__isync_row"


def _read(io: FileIO, path: str, columns: list[str]) -> pa.Table:
    with io.new_input(path).open() as stream:  # not pq.read_table: its dataset costs a small file several times the read
        return pq.ParquetFile(stream).read(columns=columns)


def position_references(io: FileIO, delete_file: DataFile) -> dict[str, int]:
    """Data file path -> how many positions ``delete_file`` (a position delete file) deletes in it."""
    named = referenced_data_file(delete_file)
    if named is not None:
        return {named: delete_file.record_count}
    counts = pc.value_counts(_read(io, delete_file.file_path, ["file_path"]).column("file_path")).to_pylist()
    return {count["values"]: count["counts"] for count in counts}


class PositionReferences:
    """:func:`position_references` of each live position delete file or DV, read once (a file never changes)."""

    def __init__(self) -> None:
        self._known: dict[FileKey, dict[str, int]] = {}

    def of(self, io: FileIO, deletes: Iterable[LiveFile]) -> dict[FileKey, dict[str, int]]:
        """The references of ``deletes`` (all of a snapshot's live ones: others are forgotten)."""
        known = {d.key: self._known[d.key] if d.key in self._known else position_references(io, d.data_file)
                 for d in deletes}
        self._known = known
        return known


def _positions(io: FileIO, delete: DataFile) -> Iterator[tuple[str, np.ndarray]]:
    """(data file path, positions) of each data file a position delete file or DV names."""
    if is_deletion_vector(delete):
        yield str(referenced_data_file(delete)), read_deletion_vector(io, delete).to_numpy()
        return
    rows = _read(io, delete.file_path, ["file_path", "pos"])
    for path in set(rows.column("file_path").to_pylist()):
        yield path, rows.column("pos").filter(pc.equal(rows.column("file_path"), path)).to_numpy()


NamedPositions = list[tuple[LiveFile, dict[str, np.ndarray]]]


def named_positions(io: FileIO, deletes: Sequence[LiveFile]) -> NamedPositions:
    """Each of ``deletes`` (position delete files or DVs), read once, with data file path -> the positions it
    names in that file."""
    return [(delete, dict(_positions(io, delete.data_file))) for delete in deletes]


def applied_positions(named: NamedPositions, data: Sequence[LiveFile]) -> dict[str, np.ndarray]:
    """Data file path -> the sorted positions the ``named`` deletes delete in it, for those of ``data`` they apply to."""
    wanted = {f.path: f for f in data}
    found: dict[str, list[np.ndarray]] = {}
    for delete, by_path in named:
        for path, positions in by_path.items():
            target = wanted.get(path)
            if target is not None and target.data_file.spec_id == delete.data_file.spec_id and \
                    target.data_file.partition == delete.data_file.partition and \
                    delete.data_sequence_number >= target.data_sequence_number:
                found.setdefault(path, []).append(positions)
    return {path: np.unique(np.concatenate(parts)) for path, parts in found.items()}


def deleted_positions(io: FileIO, deletes: Sequence[LiveFile], data: Sequence[LiveFile]) -> dict[str, np.ndarray]:
    """Data file path -> the sorted positions ``deletes`` delete in it, for those of ``data`` they apply to."""
    return applied_positions(named_positions(io, deletes), data)


def equality_keys(io: FileIO, deletes: Sequence[LiveFile], key: Sequence[str], target: pa.Schema,
                  read: MutableMapping[str, pa.Table]) -> pa.Table:
    """The keys of ``deletes`` (cast to the table's key types), each with its delete's data sequence number;
    ``read`` keeps each delete file's keys for the next group that needs them."""
    key_schema = pa.schema([target.field(name).remove_metadata() for name in key])
    parts = []
    for delete in deletes:
        if delete.path not in read:
            keys = _read(io, delete.path, list(key))
            columns = [keys.column(name).cast(key_schema.field(name).type) for name in key]
            sequence = pa.array([delete.data_sequence_number] * keys.num_rows, pa.int64())
            read[delete.path] = pa.Table.from_arrays([*columns, sequence], names=[*key, SEQUENCE_COLUMN])
        parts.append(read[delete.path])
    if not parts:
        return pa.Table.from_arrays([pa.array([], f.type) for f in key_schema] + [pa.array([], pa.int64())],
                                    names=[*key, SEQUENCE_COLUMN])
    return pa.concat_tables(parts)


class ApplicableKeys:
    """The distinct keys of equality deletes that apply to data of a given sequence number (computed once each)."""

    def __init__(self, keys: pa.Table, key: Sequence[str]):
        self._keys = keys
        self._key = list(key)
        self._by_sequence: dict[int, pa.Table] = {}

    def above(self, sequence: int) -> pa.Table:
        if sequence not in self._by_sequence:
            later = self._keys.filter(pc.greater(self._keys.column(SEQUENCE_COLUMN), sequence))
            self._by_sequence[sequence] = later.select(self._key).group_by(self._key).aggregate([])
        return self._by_sequence[sequence]


def without_keys(rows: pa.Table, keys: pa.Table, key: Sequence[str]) -> pa.Table:
    """``rows`` without those whose key is one of ``keys``, in their order."""
    if keys.num_rows == 0 or rows.num_rows == 0:
        return rows
    columns = [rows.column(k).cast(keys.schema.field(k).type) for k in key]
    numbered = pa.Table.from_arrays([*columns, pa.array(np.arange(rows.num_rows, dtype=np.int64))],
                                    names=[*key, _ROW_COLUMN])
    survivors = numbered.join(keys, keys=list(key), join_type="left anti").column(_ROW_COLUMN)
    return rows.take(pc.take(survivors, pc.sort_indices(survivors)))

