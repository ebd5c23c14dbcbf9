"""Deletion vector files (Iceberg format v3): one Puffin file holding one ``deletion-vector-v1`` blob per data file.

As Java's ``BaseDVFileWriter``: each blob has ``fields`` = [``_pos``'s id], snapshot id and sequence
number -1 (inherited at commit), no compression, and the properties ``referenced-data-file`` and
``cardinality``. Each blob is one DataFile of the table: content POSITION_DELETES, format PUFFIN,
the Puffin file's path and size, the partition and spec id of its data file, ``referenced_data_file``,
``content_offset`` and ``content_size_in_bytes`` (the blob's offset and length in the footer) and
``record_count`` = cardinality.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from importlib import metadata

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

from spark_app.iceberg.internals import (
    content_offset,
    content_size_in_bytes,
    full_data_file,
    is_deletion_vector,
    referenced_data_file,
)
from spark_app.iceberg.position_deletes.deletion_vector import ROW_POSITION_FIELD_ID, DeletionVector
from spark_app.iceberg.position_deletes.plan import DeleteTarget, PositionDeletePlan, write_new_file
from spark_app.iceberg.position_deletes.puffin import Blob, BlobMetadata, write_puffin

BLOB_TYPE = "deletion-vector-v1"
REFERENCED_DATA_FILE = "referenced-data-file"
CARDINALITY = "cardinality"


def deletion_vector_blob(target: DeleteTarget) -> Blob:
    """The Puffin blob of ``target``'s deletion vector."""
    return Blob(BLOB_TYPE, (ROW_POSITION_FIELD_ID,), -1, -1, target.positions.serialize(),
                {REFERENCED_DATA_FILE: target.path, CARDINALITY: str(target.positions.cardinality)})


def write_deletion_vectors(plan: PositionDeletePlan, targets: Sequence[DeleteTarget], name_prefix: str) -> list[DataFile]:
    """Write one Puffin file with a deletion vector per target (data files of any partitions); return their DataFiles.

    Each target must be a different data file and hold at least one position; with no targets nothing is written.
    """
    if plan.format_version < 3:
        raise ValueError(f"deletion vectors need a format-version 3 table, not {plan.format_version}")
    if not targets:
        return []
    paths = [target.path for target in targets]
    if len(set(paths)) != len(paths):
        raise ValueError("a data file is targeted twice: one deletion vector per data file")
    empty = [target.path for target in targets if not target.positions.cardinality]
    if empty:
        raise ValueError(f"an empty deletion vector is never written: {empty[:3]}")
    ordered = sorted(targets, key=lambda target: target.path)
    path = plan.new_path(f"{name_prefix}-dv-{uuid.uuid4().hex[:12]}.puffin")
    created_by = {"created-by": f"IcebergSync {metadata.version('icebergsync')}"}
    blobs, size = write_new_file(plan.io(), path,
                                 lambda stream: write_puffin(stream, map(deletion_vector_blob, ordered), created_by)[0])
    return [_dv_data_file(path, size, target, blob) for target, blob in zip(ordered, blobs, strict=True)]


def _dv_data_file(path: str, size: int, target: DeleteTarget, blob: BlobMetadata) -> DataFile:
    dv = full_data_file(
        content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.PUFFIN,
        partition=target.data_file.partition, record_count=target.positions.cardinality, file_size_in_bytes=size,
        referenced_data_file=target.path, content_offset=blob.offset, content_size_in_bytes=blob.length,
    )
    dv.spec_id = target.data_file.spec_id
    return dv


def read_deletion_vector(io: FileIO, dv: DataFile) -> DeletionVector:
    """The deletion vector a DV DataFile points at: its blob's bytes only, checked (length, magic, CRC, cardinality)."""
    if not is_deletion_vector(dv):
        raise ValueError(f"not a deletion vector: {dv.file_path} ({dv.content}, {dv.file_format})")
    offset, length = content_offset(dv), content_size_in_bytes(dv)
    if offset is None or length is None:
        raise ValueError(f"deletion vector of {referenced_data_file(dv)} in {dv.file_path} has no content offset/size")
    with io.new_input(dv.file_path).open() as stream:
        stream.seek(offset)
        blob = stream.read(length)
    return DeletionVector.deserialize(blob, cardinality=dv.record_count)
