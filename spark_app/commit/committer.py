"""Driver side of phase 2: a sink's commits behind one object, :class:`SinkCommitter`.

Every commit goes through the fenced compare-and-swap of :mod:`spark_app.commit.swap`; the commits themselves live
along the protocol: :mod:`.fence` (the start), :mod:`.data_commit` (a trigger's data, with
:mod:`.head_writes`), :mod:`.dead_letters`, :mod:`.maintenance_commits` (schema, rewrites), :mod:`.expiry` and
:mod:`.cleanup`; :mod:`.sink` holds the state they share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from icebergsync.protocol import Frontier, Progress, SourceIdentity, Writer
from icebergsync.schema import SchemaChange
from spark_app.commit.cleanup import cleanup_orphans
from spark_app.commit.data_commit import DataCommit, commit_together
from spark_app.commit.expiry import expire
from spark_app.commit.fence import claim
from spark_app.commit.head_writes import HeadWrites
from spark_app.commit.maintenance_commits import commit_manifest_rewrite, commit_rewrite, commit_schema
from spark_app.commit.partition_evolution import PartitionChange
from spark_app.commit.sink import Sink
from spark_app.commit.swap import Commit
from spark_app.commit.trigger_output import TriggerOutput

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SinkCommitter:
    """Owns every write the sink makes to the catalog."""

    def __init__(self, catalog: Catalog, identifier: str, writer: Writer, dead_letter_identifier: str | None = None,
                 rebuild_data_file: Callable[[Table, str], DataFile] | None = None,
                 spark: Callable[[], SparkSession] | None = None, copy_on_write_bytes: int = 0):
        self.sink = Sink(catalog, identifier, writer, dead_letter_identifier)
        self.head_writes = HeadWrites(self.sink, spark, copy_on_write_bytes)
        self._rebuild_data_file = rebuild_data_file

    @property
    def writer(self) -> Writer:
        return self.sink.writer

    @property
    def identifier(self) -> str:
        return self.sink.identifier

    @property
    def catalog(self) -> Catalog:
        return self.sink.catalog

    @property
    def dead_letter_identifier(self) -> str | None:
        return self.sink.dead_letter_identifier

    @property
    def last_snapshot(self) -> Snapshot | None:
        """The main-table snapshot of this writer's newest commit (its fence, before any data)."""
        return self.sink.last_snapshot

    @property
    def last_snapshot_id(self) -> int | None:
        return self.last_snapshot.snapshot_id if self.last_snapshot else None

    @property
    def frontier(self) -> Frontier | None:
        """The frontier of this writer's newest commit."""
        return self.sink.frontier

    @property
    def copy_on_write_bytes(self) -> int:
        """Keyed, position deletes: touched data files smaller than this are written again
        (changes.copyOnWriteBelow)."""
        return self.head_writes.copy_on_write_bytes

    @copy_on_write_bytes.setter
    def copy_on_write_bytes(self, value: int) -> None:
        self.head_writes.copy_on_write_bytes = value

    def start(self, schema_changes: list[SchemaChange], source: SourceIdentity | None = None,
              check_frontier: Callable[[Frontier], None] | None = None,
              partition_change: PartitionChange | None = None) -> Progress:
        """Commit the fence: evolve the schema and the partitioning, claim the sink, pin the table, recover pending
        dead letters.

        ``source`` identifies the source this sink reads (recorded with every frontier);
        ``check_frontier`` raises when a frontier does not fit that source. Before anything is
        written, raises ``FencedError`` when a higher version already owns the sink (a higher
        version's commit on the main or on the dead-letter table), and
        ``ProgressConflictError`` when the table's progress cannot be resumed from (damaged, rolled
        back, or recorded for another source).
        """
        return claim(self.sink, schema_changes, source, check_frontier, partition_change, self._rebuild_data_file)

    def commit(self, output: TriggerOutput, frontier: Frontier) -> Commit:
        """Commit one trigger's staged files and frontier in ONE main-table snapshot (dead letters follow).

        With delete files the snapshot holds the data files and the equality delete files together
        (operation ``overwrite``, or ``delete`` without data files), as Iceberg's RowDelta does.
        Position deletes and carried rows are written for the head of each round, into that round's snapshot.
        This is the cut of one table (:func:`~spark_app.commit.data_commit.commit_together`).
        """
        [commit] = commit_together([self.data_commit(output, frontier)])
        return commit

    def data_commit(self, output: TriggerOutput, frontier: Frontier, cut: Mapping[str, object] | None = None,
                    ) -> DataCommit:
        """This table's part of a trigger's commit, for :func:`~spark_app.commit.data_commit.commit_together`
        (``cut``: the snapshot's ``icebergsync.cut``, for a sync of several tables)."""
        return DataCommit(self.sink, self.head_writes, output, frontier, cut)

    def commit_maintenance(self, planned: Snapshot, removed: list[DataFile], added: list[DataFile]) -> Commit:
        """Commit a rewrite planned on the main snapshot ``planned`` as ONE ``replace`` snapshot of kind maintenance.

        It removes the files ``removed`` (data files, delete files and DVs), adds the files ``added`` with the
        data sequence number of ``planned`` (so that every delete committed after ``planned`` still
        applies to them) and carries this writer's frontier and checkpoint unchanged, through the
        same fenced compare-and-swap as a data commit. A fenced writer lands nothing
        (``FencedError``); when main moved past ``planned`` (another writer committed meanwhile)
        ``MaintenanceConflictError`` says to plan again. Either way the caller deletes ``added``.
        """
        return commit_rewrite(self.sink, planned, removed, added)

    def commit_manifest_rewrite(self, planned: Snapshot, bins: Sequence[Sequence[ManifestFile]]) -> Commit:
        """Commit a manifest rewrite planned on the main snapshot ``planned`` (each of ``bins`` merged into one
        manifest, every entry's sequence numbers kept) as ONE ``replace`` snapshot of kind maintenance, fenced
        and dropped when main moved exactly as :meth:`commit_maintenance`."""
        return commit_manifest_rewrite(self.sink, planned, bins)

    def evolve_schema(self, changes: list[SchemaChange]) -> Commit:
        """Commit ``changes`` to the main table's schema as ONE empty snapshot of kind ``schema``.

        The change and the snapshot are one transaction through the fenced compare-and-swap of a data
        commit: a fenced (older) version changes nothing (``FencedError``), and the frontier and
        checkpoint are this writer's, unchanged. The table is pinned to the new schema afterwards.
        """
        return commit_schema(self.sink, changes)

    def expire_snapshots(self, older_than_ms: int, retain_last: int) -> list[Snapshot]:
        """Expire main-table snapshots older than ``older_than_ms`` (epoch ms) beyond the newest ``retain_last``
        of main, under the fence; return the expired snapshots.

        Never expired: the heads of branches and tags, the newest ``retain_last`` snapshots of main,
        and this writer's own newest snapshot (the fence check looks for it). The checkpoint property
        is untouched: it is what recovery reads once the snapshots carrying the summaries are gone.
        The commit asserts main's head and the table uuid, after the same fence check as a data
        commit; a conflict re-checks and recomputes. Expiry is idempotent, so an unknown outcome is
        retried the same way (a landed expiry leaves nothing to expire).
        """
        return expire(self.sink, older_than_ms, retain_last)

    def cleanup_orphans(self, table: Table, older_than_ms: int | None = None) -> list[str]:
        """Delete files of earlier attempts of this sink that no snapshot references: staged data and delete
        files, and the manifests and manifest lists of commits that never landed.

        Only files of lower versions, or of the same version by another attempt written before this
        attempt's fence, are candidates: a newer writer's files are never touched. With
        ``older_than_ms`` (epoch ms) only files written before it are (the periodic removal's safety age).
        """
        assert self.sink.fence_time_ms is not None
        return cleanup_orphans(self.writer, self.sink.fence_time_ms, table, older_than_ms)

    def discard(self, output: TriggerOutput) -> None:
        """Delete files staged for a main commit that certainly did not land."""
        self.sink.delete_paths(output.all_paths())
