"""Reading a table's metadata file (for a SQL catalog, which stores only its location), capped in size.

A local file is read only where the read's scope allows local files (never in a cluster) and only if
it is a regular file (a FIFO or device would block or never end); an S3 object through ``s3_read``
on the read's bounded session. A ``.gz.metadata.json`` file is decompressed with the same cap, every
byte charged to the read's memory share.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

import requests
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from icebergsync_operator.bounded_http import CHUNK, CappedBody
from icebergsync_operator.catalog_access import CatalogAccessError
from icebergsync_operator.read_bounds import ReadBounds
from icebergsync_operator.s3_read import get_object

S3_SCHEMES = ("s3", "s3a", "s3n")


def _open_local(path: str) -> BinaryIO:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CatalogAccessError(f"table metadata {path} is not a regular file")
    return os.fdopen(fd, "rb")


def _read_local(path: str, bounds: ReadBounds) -> bytes:
    bounds.scope.check_local(f"table metadata {path}")
    body = CappedBody("", bounds.memory)
    with _open_local(path) as stream:
        while chunk := stream.read(CHUNK):
            bounds.deadline.remaining()
            body.feed(chunk)
    return bytes(body.data)


def read_metadata_file(location: str, s3_properties: Mapping[str, str], session: requests.Session,
                       bounds: ReadBounds) -> TableMetadata:
    """Parse the metadata file at ``location`` (local path, ``file://`` or ``s3://``)."""
    parts = urlsplit(location)
    if parts.scheme in S3_SCHEMES:
        data = get_object(session, location, s3_properties)
    elif parts.scheme in ("", "file"):
        data = _read_local(unquote(parts.path) if parts.scheme else location, bounds)
    else:
        raise CatalogAccessError(f"table metadata at {parts.scheme}:// locations is not read by the operator")
    if location.endswith(".gz.metadata.json"):
        body = CappedBody("gzip", bounds.memory)
        body.feed(data)
        data = bytes(body.data)
    return TableMetadataUtil.parse_raw(data.decode())
