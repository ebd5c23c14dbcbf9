"""Writing a live data file's rows again: what upkeep's rewrite and the commit's copy-on-write share.

:class:`RewriteContext` is what writing needs of a table, picklable for Spark tasks; :func:`write_live_rows`
reads one data file in the table's current columns without the rows deleted from it and writes the rest
through the rolling writer, with their row lineage on format 3 (:mod:`spark_app.staging.lineage`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.name_mapping import NameMapping
from pyiceberg.typedef import TableVersion

from spark_app.iceberg.internals import LiveFile, read_data_file
from spark_app.staging.lineage import Lineage, with_lineage
from spark_app.staging.writer import PartitionedWriter, RollingParquetWriter, TablePlan, conform


@dataclass(frozen=True)
class RewriteContext:
    """What writing a plan's files needs, picklable for the tasks: the table's schema, specs and storage."""

    location: str
    properties: dict[str, str]
    io_properties: dict[str, str]
    schema: Schema
    specs: dict[int, PartitionSpec]
    format_version: TableVersion
    name_mapping: NameMapping | None
    target_file_bytes: int

    default_spec_id: int

    @classmethod
    def of(cls, table: Table, target_file_bytes: int) -> RewriteContext:
        metadata = table.metadata
        return cls(metadata.location, dict(metadata.properties), dict(table.io.properties), table.schema(),
                   metadata.specs(), metadata.format_version, metadata.name_mapping(), target_file_bytes,
                   metadata.default_spec_id)

    def io(self) -> FileIO:
        return load_file_io(self.io_properties, self.location)

    @property
    def keeps_lineage(self) -> bool:
        """Whether rewritten rows keep their row lineage (format 3: :mod:`spark_app.staging.lineage`)."""
        return self.format_version >= 3

    @property
    def file_schema(self) -> Schema:
        """The columns a rewrite reads and writes: the table's, and on format 3 the lineage columns."""
        return with_lineage(self.schema) if self.keeps_lineage else self.schema

    def table_plan(self, spec_id: int) -> TablePlan:
        return TablePlan(self.location, self.properties, self.file_schema, self.specs[spec_id], self.io_properties)

    @property
    def key(self) -> list[str]:
        """The identifier fields, in schema order (the columns of the sink's equality deletes)."""
        names = set(self.schema.identifier_field_names())
        return [f.name for f in self.schema.fields if f.name in names]



def write_live_rows(context: RewriteContext, io: FileIO, writer: RollingParquetWriter | PartitionedWriter,
                    target: pa.Schema,
                    live: LiveFile, spec_id: int, deleted: np.ndarray | None,
                    keep: Callable[[pa.Table], pa.Table] | None = None) -> int:
    """Write the rows of ``live`` (of spec ``spec_id``) but those at the ``deleted`` positions and those ``keep``
    drops, in ``target``'s columns, with their row lineage on format 3; return how many rows were written."""
    lineage = Lineage(live, deleted) if context.keeps_lineage else None
    written = 0
    for batch in read_data_file(io, live.data_file, context.file_schema, context.specs[spec_id],
                                context.format_version, context.name_mapping,
                                pa.array(deleted) if deleted is not None else None):
        rows = pa.Table.from_batches([batch])
        if lineage is not None:
            rows = lineage.fill(rows)
        if keep is not None:
            rows = keep(rows)
        for conformed in conform(rows, target).to_batches():
            written += conformed.num_rows
            writer.write(conformed)
    return written
