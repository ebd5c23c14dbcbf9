"""Which files a table's snapshots reference: what cleanup and dead-letter recovery must not delete or add twice."""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from icebergsync.storage import normalize


def referenced_files(table: Table) -> set[str]:
    """Normalized paths of every file any snapshot of the table references: manifest lists, manifests, and their
    data and delete files."""
    return set(file_references(table, table.metadata.snapshots, live_only=False))


def file_references(table: Table, snapshots: Sequence[Snapshot], live_only: bool) -> dict[str, str]:
    """Normalized path -> URI of the files ``snapshots`` reference: manifest lists, manifests, and their data and
    delete files (``live_only``: only those live in a snapshot, not those it records as deleted)."""
    referenced: dict[str, str] = {}
    for snapshot in snapshots:
        referenced[normalize(snapshot.manifest_list)] = snapshot.manifest_list
        for manifest in snapshot.manifests(table.io):
            if normalize(manifest.manifest_path) in referenced:
                continue
            referenced[normalize(manifest.manifest_path)] = manifest.manifest_path
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=live_only):
                referenced[normalize(entry.data_file.file_path)] = entry.data_file.file_path
    return referenced
