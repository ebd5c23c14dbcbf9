"""Listing and deleting files on the table's storage (local or S3) through pyarrow's filesystems."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow.fs as pafs
from pyiceberg.io.pyarrow import PyArrowFileIO

from icebergsync.transient.object_store import RetryingFileIO


@dataclass(frozen=True)
class StoredFile:
    uri: str
    mtime: datetime | None
    size: int


def _scheme_prefix(scheme: str) -> str:
    return "file://" if scheme == "file" else f"{scheme}://"


def list_files(location: str, io_properties: dict[str, str]) -> list[StoredFile]:
    """Every file below ``location`` (recursively), as URIs with the location's scheme; listed through the job's
    FileIO, so that the object store's transient answers are retried as for every other call."""
    io = RetryingFileIO(io_properties)
    scheme, netloc, path = io.parse_location(location)
    filesystem = io.fs_by_scheme(scheme, netloc)
    selector = pafs.FileSelector(path.rstrip("/"), recursive=True, allow_not_found=True)
    return [
        StoredFile(_scheme_prefix(scheme) + info.path, info.mtime, info.size)
        for info in filesystem.get_file_info(selector)
        if info.type == pafs.FileType.File
    ]


def normalize(uri: str) -> str:
    """A comparable form of a file URI (``file:/x``, ``file:///x`` and ``/x`` are the same file)."""
    _, _, path = PyArrowFileIO.parse_location(uri)
    return path
