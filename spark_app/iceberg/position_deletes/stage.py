"""Stage the position deletes of one commit against a table's current snapshot.

Given row positions per live data file, write what the table's format takes and say what the commit
must remove: format 2 gets position delete files, one per partition; format 3 gets deletion
vectors, all in one Puffin file, each the union of the new positions and the data file's live DV,
which the same commit must remove (the spec allows one DV per data file). A v3 table that still has
v2 position delete files that may reference a target (one upgraded from v2) is refused: their
deletes would have to be merged into the new DV and is not supported yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table

from spark_app.iceberg.internals import is_deletion_vector, live_files, referenced_data_file
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector
from spark_app.iceberg.position_deletes.dv_files import read_deletion_vector, write_deletion_vectors
from spark_app.iceberg.position_deletes.plan import DeleteTarget, position_delete_plan
from spark_app.iceberg.position_deletes.position_files import write_position_delete_file


@dataclass(frozen=True)
class PositionDeleteDelta:
    """The delete files a commit adds, and the ones it removes (DVs its new DVs replace)."""

    added: list[DataFile] = field(default_factory=list)
    removed: list[DataFile] = field(default_factory=list)


def stage_position_deletes(table: Table, deletes: Mapping[str, DeletionVector], name_prefix: str) -> PositionDeleteDelta:
    """Write the delete files for ``deletes`` (data file path -> positions to delete) of ``table``'s current snapshot.

    Raises ``ValueError`` when a path is not a live data file of that snapshot.
    """
    deletes = {path: positions for path, positions in deletes.items() if positions.cardinality}
    if not deletes:
        return PositionDeleteDelta()
    plan = position_delete_plan(table)
    snapshot = table.current_snapshot()
    live = live_files(table, snapshot) if snapshot is not None else []
    data_files = {f.path: f.data_file for f in live if f.data_file.content == DataFileContent.DATA}
    unknown = sorted(set(deletes) - set(data_files))
    if unknown:
        raise ValueError(f"position deletes reference files that are not live data files of the table: {unknown[:3]}")
    targets = [DeleteTarget(data_files[path], positions) for path, positions in sorted(deletes.items())]
    if plan.format_version == 2:
        by_partition: dict[tuple[int, object], list[DeleteTarget]] = {}
        for target in targets:
            by_partition.setdefault((target.data_file.spec_id, target.data_file.partition), []).append(target)
        return PositionDeleteDelta([write_position_delete_file(plan, group, name_prefix) for group in by_partition.values()])
    position_files = [f.data_file for f in live if f.data_file.content == DataFileContent.POSITION_DELETES
                      and not is_deletion_vector(f.data_file)
                      and referenced_data_file(f.data_file) in (None, *deletes)]
    if position_files:
        raise ValueError(f"v2 position delete files may reference these data files ({position_files[0].file_path}): "
                         "merging them into deletion vectors is not supported")
    previous = {referenced_data_file(f.data_file): f.data_file for f in live if is_deletion_vector(f.data_file)}
    io = table.io
    merged, removed = [], []
    for target in targets:
        old = previous.get(target.path)
        if old is not None:
            target = DeleteTarget(target.data_file, target.positions.union(read_deletion_vector(io, old)))
            removed.append(old)
        merged.append(target)
    return PositionDeleteDelta(write_deletion_vectors(plan, merged, name_prefix), removed)
