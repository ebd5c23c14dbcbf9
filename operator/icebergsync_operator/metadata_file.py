"""Reading a table's metadata file (for a SQL catalog, which stores only its location), capped in size.

Local files are read only if they are regular files (a FIFO or device would block or never end);
S3 objects through pyiceberg's FileIO with the allow-listed S3 properties, in chunks, checking the
deadline between them. A ``.gz.metadata.json`` file is decompressed with the same cap.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from pyiceberg.io import load_file_io
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from icebergsync_operator.bounded_http import CHUNK, CappedBody
from icebergsync_operator.catalog_access import CatalogAccessError
from icebergsync_operator.deadline import Deadline

S3_SCHEMES = ("s3", "s3a", "s3n")


def _read(stream: BinaryIO, deadline: Deadline, body: CappedBody) -> bytes:
    while chunk := stream.read(CHUNK):
        deadline.remaining()
        body.feed(chunk)
    return bytes(body.data)


def _open_local(path: str) -> BinaryIO:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CatalogAccessError(f"table metadata {path} is not a regular file")
    return os.fdopen(fd, "rb")


def _open(location: str, s3_properties: Mapping[str, str], deadline: Deadline) -> BinaryIO:
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        return _open_local(unquote(parts.path) if parts.scheme else location)
    if parts.scheme in S3_SCHEMES:
        timeout = str(deadline.remaining())
        io = load_file_io({**s3_properties, "s3.connect-timeout": timeout, "s3.request-timeout": timeout}, location)
        return io.new_input(location).open()  # type: ignore[return-value]
    raise CatalogAccessError(f"table metadata at {parts.scheme}:// locations is not read by the operator")


def read_metadata_file(location: str, s3_properties: Mapping[str, str], deadline: Deadline,
                       limit: int) -> TableMetadata:
    """Parse the metadata file at ``location`` (local path, ``file://`` or ``s3://``)."""
    encoding = "gzip" if location.endswith(".gz.metadata.json") else ""
    with _open(location, s3_properties, deadline) as stream:
        data = _read(stream, deadline, CappedBody(encoding, limit))
    return TableMetadataUtil.parse_raw(data.decode())
