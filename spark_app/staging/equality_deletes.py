"""Equality delete files for keyed tables: the keys a trigger touches, applied to every partition.

With ``changes.deletes: equality`` (the default is position deletes: spark_app/iceberg/position_deletes/),
each trigger of a keyed sync commits, in ONE snapshot, the winning upserts as data files and every
key it touches as an *equality delete* on the key columns (docs/dataplane.md). An equality delete
removes the rows with its key from data files of strictly lower sequence number, so the trigger's
own new rows survive while every older version of the key goes. It applies to data files of any
partition only when its partition spec is unpartitioned (Iceberg spec, "Scan planning"), so a
row that moved to another partition (``day(updated_at)`` changed) leaves nothing behind: delete
files are written under the table's unpartitioned spec (added, not made default, when a keyed
table is created or fenced: :func:`spark_app.iceberg.internals.add_unpartitioned_spec`).

Files are named with the attempt's prefix and live under the table's data location, so orphan
cleanup and discard treat them like staged data files.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.typedef import Record

from icebergsync.errors import IncompatibleSchemaError
from spark_app.iceberg.internals import footer_statistics, new_data_location, unpartitioned_spec_id
from spark_app.iceberg.position_deletes.plan import write_new_file


@dataclass(frozen=True)
class DeletePlan:
    """What a task needs to write a table's equality delete files (picklable, shipped per trigger)."""

    location: str
    properties: dict[str, str]
    schema: Schema  # the table's schema
    key: tuple[str, ...]
    spec_id: int  # an unpartitioned spec of the table
    io_properties: dict[str, str]

    def key_schema(self) -> Schema:
        """The key columns with the table's field ids and types (the delete file's schema)."""
        return self.schema.select(*self.key, case_sensitive=True)

    def equality_ids(self) -> list[int]:
        return [self.schema.find_field(name).field_id for name in self.key]

    def arrow_schema(self) -> pa.Schema:
        # Key columns are required: Iceberg identifier fields are never null.
        return schema_to_pyarrow(self.key_schema(), include_field_ids=True)


def table_key(table: Table) -> tuple[str, ...]:
    """A keyed table's key: its identifier fields, in the schema's order; raises when it has none."""
    schema = table.schema()
    key = schema.identifier_field_names()
    if not key:
        raise ValueError(f"table {table.name()} has no identifier fields: it is not keyed")
    return tuple(field.name for field in schema.fields if field.name in key)


def delete_plan(table: Table) -> DeletePlan:
    """The equality delete plan of a keyed table (its identifier fields are the key); raises when it cannot take
    equality deletes."""
    metadata = table.metadata
    schema = table.schema()
    ordered = table_key(table)
    if metadata.format_version != 2:
        raise IncompatibleSchemaError(
            f"table {table.name()} is format-version {metadata.format_version}: changes.deletes: equality writes equality "
            "delete files for format-version 2 tables only; use changes.deletes: position (deletion vectors on 3)")
    spec_id = unpartitioned_spec_id(metadata)
    if spec_id is None:
        raise ValueError(f"table {table.name()} has no unpartitioned spec for its equality deletes (the fence adds one)")
    return DeletePlan(metadata.location, dict(metadata.properties), schema, ordered, spec_id, dict(table.io.properties))


def write_equality_deletes(plan: DeletePlan, keys: pa.Table, name_prefix: str) -> DataFile | None:
    """Write ``keys`` (the key columns, one row per key) as one equality delete file; None when empty.

    The file's Parquet schema carries the table's field ids; the DataFile has content
    EQUALITY_DELETES, ``equality_ids`` = the key's field ids, the unpartitioned spec and the column
    statistics of its footer.
    """
    if keys.num_rows == 0:
        return None
    target = plan.arrow_schema()
    columns = []
    for field in target:
        column = keys.column(field.name)
        if column.null_count:
            raise ValueError(f"key column {field.name} has nulls: a key is never null")
        columns.append(column if column.type == field.type else pc.cast(column, field.type))
    table = pa.Table.from_arrays(columns, schema=target)
    io = load_file_io(plan.io_properties, plan.location)
    name = f"{name_prefix}-eqdel-{uuid.uuid4().hex[:12]}.parquet"
    path = new_data_location(load_location_provider(plan.location, plan.properties), name, None)

    def write(stream: Any) -> pq.FileMetaData:
        writer = pq.ParquetWriter(stream, schema=target, compression="zstd")
        writer.write_table(table)
        writer.close()
        return writer.writer.metadata

    metadata, size = write_new_file(io, path, write)
    statistics = footer_statistics(plan.key_schema(), plan.properties, metadata)
    delete_file = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES, file_path=path, file_format=FileFormat.PARQUET, partition=Record(),
        file_size_in_bytes=size, sort_order_id=None, equality_ids=plan.equality_ids(), key_metadata=None,
        **statistics.to_serialized_dict(),
    )
    delete_file.spec_id = plan.spec_id  # not a field of the stored struct: from_args would drop it (it pickles)
    return delete_file
