"""A sink's expiry of old main-table snapshots: a metadata-only commit through the fenced compare-and-swap."""

from __future__ import annotations

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from icebergsync import protocol
from spark_app.commit.sink import Sink
from spark_app.commit.swap import swap
from spark_app.iceberg.internals import expire_snapshots as stage_expiry


def expirable_snapshots(metadata: TableMetadata, older_than_ms: int, retain_last: int,
                        keep: int | None = None) -> list[Snapshot]:
    """Snapshots an expiry removes: older than ``older_than_ms``, not among the newest ``retain_last`` of main,
    not the head of a branch or tag, and not ``keep``."""
    retained = {s.snapshot_id for _, s in zip(range(max(retain_last, 1)), protocol.main_ancestry(metadata), strict=False)}
    protected = {ref.snapshot_id for ref in metadata.refs.values()} | retained | ({keep} if keep is not None else set())
    return [s for s in metadata.snapshots if s.snapshot_id not in protected and s.timestamp_ms < older_than_ms]


def expire(sink: Sink, older_than_ms: int, retain_last: int) -> list[Snapshot]:
    """Expire main-table snapshots of ``sink``'s table older than ``older_than_ms`` beyond the newest
    ``retain_last`` of main, under the fence; return the expired snapshots (see
    :meth:`spark_app.commit.committer.SinkCommitter.expire_snapshots`).

    Each round recomputes what to expire on the head it checked: after a conflict, or an unknown outcome (an
    expiry is idempotent: a landed one leaves nothing to expire).
    """
    keep = sink.last_snapshot.snapshot_id if sink.last_snapshot else None
    expired: list[Snapshot] = []

    def build(table: Table) -> tuple[Transaction, None] | None:
        expired[:] = expirable_snapshots(table.metadata, older_than_ms, retain_last, keep)
        if not expired:
            return None
        transaction = Transaction(table)
        stage_expiry(transaction, [s.snapshot_id for s in expired])
        return transaction, None

    part = sink.part(sink.identifier, sink.steady_check(sink.last_snapshot), build)
    return expired if swap(sink.catalog, [part], "expiry") is not None else []
