"""A lane: everything a sync does to one table, exactly a single-table sink of the streams routed to it.

A sync of one table is one lane over every stream of its source; a sync whose ``table.name`` is a template
has a lane per table the template names (docs/protocol.md, "Many tables in one sync"). A lane is *claimed*
(its fence committed, its table created when missing) before its first data commit of the attempt: a sync of
one table claims it at start, a sync of many claims each table when a trigger first has records for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from icebergsync.catalog import ensure_table
from icebergsync.errors import IcebergSyncError
from icebergsync.protocol import Frontier, Progress, SourceIdentity, Writer, attempt_file_prefix, encode_json
from icebergsync.schema import iceberg_schema, plan_evolution, spark_ddl
from icebergsync.spec import Column, IcebergSyncSpec, TableSettings
from icebergsync.table_routing import table_frontier
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.partition_evolution import plan_partition_change
from spark_app.commit.schema_changes import new_table_columns, schema_changes, table_columns
from spark_app.commit.swap import Commit
from spark_app.decoding.deadletter import DEAD_LETTER_SCHEMA
from spark_app.decoding.schema_drift.drift import SchemaDrift
from spark_app.decoding.source_positions import Position
from spark_app.faults import crash_point
from spark_app.staging.equality_deletes import delete_plan, table_key
from spark_app.staging.writer import WRITER_MEMORY_BYTES, WritePlan, rebuild_data_file, table_plan
from spark_app.upkeep.runner import Maintainer, UpkeepTotals

log = logging.getLogger("icebergsync.job")



class Lane:
    """One table of a sync: its settings, its streams, its committer and, once claimed, its write plan."""

    def __init__(self, spec: IcebergSyncSpec, settings: TableSettings, owns: Callable[[str], bool] | None,
                 writer: Writer, catalog: Catalog, spark: Callable[[], SparkSession], upkeep: UpkeepTotals):
        self.spec = spec
        self.settings = settings
        self.owns = owns  # whether a stream goes to this table; None: every stream does (a sync of one table)
        self.writer = writer
        self.catalog = catalog
        self._spark = spark
        self._upkeep = upkeep
        self.columns = list(settings.columns)
        self.committer = SinkCommitter(
            catalog, settings.name, writer, settings.dead_letter, rebuild_data_file, spark,
            copy_on_write_bytes=spec.changes.copy_on_write_bytes if spec.changes is not None and settings.key is not None
            else 0)
        self.plan: WritePlan | None = None  # set by the claim
        self.maintainer: Maintainer | None = None
        self.truncated_at: Position | None = None  # the source truncate this run applies: what precedes it is skipped
        self.truncate_pending: Position | None = None  # a truncate found whose commit (emptying the table) is due

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def claimed(self) -> bool:
        return self.plan is not None

    def part_of(self, frontier: Frontier) -> Frontier:
        """This table's part of the sync's frontier: the entries of its streams."""
        return dict(frontier) if self.owns is None else table_frontier(frontier, self.owns)

    def existing_columns(self) -> list[Column] | None:
        """The columns of the table when it exists (what a sync following the source's schema decodes into)."""
        try:
            table = self.catalog.load_table(self.name)
        except NoSuchTableError:
            return None
        return table_columns(table.schema(), self.name)

    def columns_from_drift(self, drift: SchemaDrift) -> None:
        """A new table's columns from the Connect schema of its first records (key columns required)."""
        self.columns = new_table_columns(drift, self.name, self.settings.key or [])
        log.info("%s: no columns are declared for %s; creating it with the columns of the first records: %s",
                 self.writer.sink_id, self.name, spark_ddl(self.columns))

    def claim(self, source: SourceIdentity, check_frontier: Callable[[Frontier], None]) -> Progress:
        """Create the table when missing, commit this writer's fence on it (with the spec's schema changes) and
        set up writing; the progress the fence read under its compare-and-swap."""
        table, _ = self._open_tables()
        changes = plan_evolution(table.schema(), self.columns, self.name, followed=self.spec.follows_source_schema)
        partitioning = plan_partition_change(self.name, table.schema(), table.spec(), self.settings.partition_by,
                                             self._partition_by_field())
        progress = self.committer.start(changes, source, check_frontier, partitioning)
        crash_point("fenced")
        if changes:
            log.info("%s v%d: evolved the schema of %s: %s", self.writer.sink_id, self.writer.version, self.name,
                     ", ".join(change.describe() for change in changes))
        if partitioning is not None:
            log.info("%s v%d: evolved the partitioning of %s to %s: %s; files written before keep theirs",
                     self.writer.sink_id, self.writer.version, self.name, self.settings.partition_by,
                     partitioning.describe(table.schema()))
        table, dead = self._open_tables()
        self.committer.cleanup_orphans(table)
        if dead is not None:
            self.committer.cleanup_orphans(dead)
        log.info("%s v%d attempt %s fenced %s; resuming it from %s (%s)", self.writer.sink_id, self.writer.version,
                 self.writer.attempt, self.name, encode_json(progress.frontier), progress.resumed_from)
        self._decode_into(table)
        self.plan = self._write_plan(table, dead)
        self.maintainer = Maintainer(self.spec.maintenance, self.committer, self.catalog, self.name,
                                     self.spec.commit.target_file_bytes, self._spark, totals=self._upkeep)
        return progress

    def follow_schema(self, drift: SchemaDrift) -> None:
        """Commit the schema change this table's records asked for (its own fenced commit), then plan with it."""
        metadata = self.catalog.load_table(self.name).metadata  # format 3: new columns take defaults
        # raises, naming the columns, when Iceberg cannot
        changes = schema_changes(drift, self.name, metadata.format_version, metadata.schema())
        if not changes:
            raise IcebergSyncError(f"{self.name}: records asked for a schema change the table already "
                                   f"has ({drift.describe()}); nothing was committed")
        commit: Commit = self.committer.evolve_schema(changes)
        crash_point("schema-committed")
        log.info("%s v%d: the source's schema changed; %s now has: %s (snapshot %d, frontier unchanged)",
                 self.writer.sink_id, self.writer.version, self.name,
                 ", ".join(change.describe() for change in changes), commit.snapshot.snapshot_id)
        table, dead = self._open_tables()
        self._decode_into(table)
        self.plan = self._write_plan(table, dead)

    def _open_tables(self) -> tuple[Table, Table | None]:
        table = ensure_table(self.catalog, self.name, iceberg_schema(self.columns), self.settings.partition_by,
                             self.settings.properties, key=self.settings.key)
        dead = None
        if self.settings.dead_letter:
            dead = ensure_table(self.catalog, self.settings.dead_letter, DEAD_LETTER_SCHEMA, [], {})
        return table, dead

    def _decode_into(self, table: Table) -> None:
        """A sync following the source's schema decodes into the table's columns (the spec's, evolved)."""
        if self.spec.follows_source_schema:
            self.columns = table_columns(table.schema(), self.name)

    def _partition_by_field(self) -> str:
        """Where this table's ``partitionBy`` is declared: its ``spec.tables`` override, or ``spec.table``."""
        override = self.spec.tables.get(self.name)
        return f"spec.tables[{self.name}]" if override is not None and override.partition_by is not None else \
            "spec.table"

    def _write_plan(self, table: Table, dead: Table | None) -> WritePlan:
        return WritePlan(
            sink_id=self.writer.sink_id,
            sink_version=self.writer.version,
            file_prefix=attempt_file_prefix(self.writer),
            table=table_plan(table),
            dead_letter=table_plan(dead) if dead is not None else None,
            target_file_bytes=self.spec.commit.target_file_bytes,
            writer_memory_bytes=WRITER_MEMORY_BYTES,
            required_columns=tuple(f.name for f in table.schema().fields if f.required),
            event_time_column=self.spec.event_time_column,
            key=None if not self.spec.changes else () if self.settings.keyless else table_key(table),
            deletes=delete_plan(table) if self.spec.changes and self.spec.changes.deletes == "equality" else None,
        )
