"""What writing a table's position deletes needs, and the one file-writing step both kinds share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pyiceberg.io import FileIO, load_file_io
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.locations import load_location_provider

from icebergsync.transient.object_store import close_upload
from spark_app.iceberg.internals import new_data_location
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector

T = TypeVar("T")


@dataclass(frozen=True)
class PositionDeletePlan:
    """A table's location, properties, FileIO and format version (picklable, for tasks too).

    Format 2 takes position delete files (Parquet), format 3 deletion vectors (Puffin): the spec
    forbids adding position delete files to a v3 table.
    """

    location: str
    properties: dict[str, str]
    io_properties: dict[str, str]
    format_version: int

    def io(self) -> FileIO:
        return load_file_io(self.io_properties, self.location)

    def new_path(self, file_name: str) -> str:
        """Where a new delete file goes: the table's data location (as staged data files, for orphan cleanup)."""
        return new_data_location(load_location_provider(self.location, self.properties), file_name, None)


def position_delete_plan(table: Table) -> PositionDeletePlan:
    """The plan of ``table``; raises ``ValueError`` for a format-version 1 table (no row-level deletes)."""
    metadata = table.metadata
    if metadata.format_version < 2:
        raise ValueError(f"table {table.name()} is format-version {metadata.format_version}: position deletes need 2 or 3")
    return PositionDeletePlan(metadata.location, dict(metadata.properties), dict(table.io.properties),
                              metadata.format_version)


@dataclass(frozen=True)
class DeleteTarget:
    """Rows of one live data file to delete: the file (its path, partition and spec id) and their positions."""

    data_file: DataFile
    positions: DeletionVector

    @property
    def path(self) -> str:
        return self.data_file.file_path


def write_new_file(io: FileIO, path: str, write: Callable[[Any], T]) -> tuple[T, int]:
    """Create ``path`` (never overwriting), let ``write`` fill the stream; return its result and the file's size.

    On any failure the partly written file is deleted.
    """
    stream = io.new_output(path).create(overwrite=False)
    try:
        result = write(stream)
        size = stream.tell()
        close_upload(stream, io, path, size)
    except BaseException:
        stream.close()
        io.delete(path)
        raise
    return result, size
