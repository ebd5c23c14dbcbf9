"""Position delete files (Iceberg format v2): Parquet files of ``(file_path, pos)`` rows.

The schema is the spec's ``file_position_delete`` without the optional ``row``: ``file_path``
(field id 2147483546, string, required) and ``pos`` (2147483545, long, required), sorted by
``file_path`` then ``pos``. One file holds deletes of data files of one partition (spec and
values), whose partition it carries; it names its data file in ``referenced_data_file`` when it
references only one. Column bounds are kept in full (Java's ``MetricsConfig.forPositionDelete``),
so readers can tell which data files a file may reference.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from spark_app.iceberg.internals import footer_statistics, full_data_file
from spark_app.iceberg.position_deletes.plan import DeleteTarget, PositionDeletePlan, write_new_file

FILE_PATH_FIELD_ID = 2147483546
POS_FIELD_ID = 2147483545
SCHEMA = Schema(NestedField(FILE_PATH_FIELD_ID, "file_path", StringType(), required=True),
                NestedField(POS_FIELD_ID, "pos", LongType(), required=True))
ARROW_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_FIELD_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_FIELD_ID).encode()}),
])
_FULL_METRICS = {"write.metadata.metrics.default": "full"}


def position_delete_rows(targets: Sequence[DeleteTarget]) -> pa.Table:
    """The rows of a position delete file for ``targets``, sorted by ``file_path`` then ``pos``."""
    ordered = sorted(targets, key=lambda target: target.path)
    positions = [target.positions.to_numpy() for target in ordered]
    paths = pa.array([target.path for target in ordered], pa.string())
    indexes = np.repeat(np.arange(len(ordered)), [len(p) for p in positions])
    return pa.Table.from_arrays(
        [paths.take(pa.array(indexes, pa.int64())), pa.array(np.concatenate(positions) if positions else [], pa.int64())],
        schema=ARROW_SCHEMA)


def write_position_delete_file(plan: PositionDeletePlan, targets: Sequence[DeleteTarget], name_prefix: str) -> DataFile:
    """Write the deletes of ``targets`` (data files of one partition) as one position delete file; return its DataFile."""
    if plan.format_version != 2:
        raise ValueError(f"position delete files are written to format-version 2 tables only, not {plan.format_version} "
                         "(format 3 takes deletion vectors)")
    targets = [target for target in targets if target.positions.cardinality]
    if not targets:
        raise ValueError("a position delete file needs at least one deleted position")
    paths = [target.path for target in targets]
    if len(set(paths)) != len(paths):
        raise ValueError("a data file is targeted twice: merge its positions into one DeleteTarget")
    first = targets[0].data_file
    for target in targets[1:]:
        if (target.data_file.spec_id, target.data_file.partition) != (first.spec_id, first.partition):
            raise ValueError(f"{target.path} is not in the partition of {first.file_path}: one file per partition")
    rows = position_delete_rows(targets)
    path = plan.new_path(f"{name_prefix}-posdel-{uuid.uuid4().hex[:12]}.parquet")

    def write(stream: pa.NativeFile) -> pq.FileMetaData:
        with pq.ParquetWriter(stream, schema=ARROW_SCHEMA, compression="zstd") as writer:
            writer.write_table(rows)
        return writer.writer.metadata

    metadata, size = write_new_file(plan.io(), path, write)
    statistics = footer_statistics(SCHEMA, _FULL_METRICS, metadata)
    delete_file = full_data_file(
        content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.PARQUET,
        partition=first.partition, file_size_in_bytes=size, sort_order_id=None, key_metadata=None,
        referenced_data_file=paths[0] if len(paths) == 1 else None, **statistics.to_serialized_dict(),
    )
    delete_file.spec_id = first.spec_id
    return delete_file
