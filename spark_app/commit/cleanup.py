"""The start-up cleanup: files of earlier attempts of a sink that no snapshot references."""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime

from pyiceberg.table import Table

from icebergsync.protocol import Writer, file_owner, sink_file_prefix
from icebergsync.storage import list_files, normalize
from spark_app.commit.references import referenced_files

log = logging.getLogger("icebergsync.committer")


def cleanup_orphans(writer: Writer, fence_time_ms: int, table: Table, older_than_ms: int | None = None) -> list[str]:
    """Delete files of earlier attempts of ``writer``'s sink that no snapshot references: staged data and delete
    files, and the manifests and manifest lists of commits that never landed.

    Only files of lower versions, or of the same version by another attempt written before this
    attempt's fence (at ``fence_time_ms``), are candidates: a newer writer's files are never touched. With
    ``older_than_ms`` (epoch ms) only files written before it are (the periodic removal's safety age).
    """
    fence_time = datetime.fromtimestamp(fence_time_ms / 1000, tz=UTC)
    before = datetime.fromtimestamp(older_than_ms / 1000, tz=UTC) if older_than_ms is not None else None
    prefix = sink_file_prefix(writer.sink_id)
    candidates = []
    metadata_dir = table.location_provider().new_metadata_location("").rstrip("/")
    stored_files = [*list_files(f"{table.metadata.location}/data", table.io.properties),
                    *(f for f in list_files(metadata_dir, table.io.properties) if f.uri.endswith(".avro"))]
    for stored in stored_files:
        owner = file_owner(stored.uri.rsplit("/", 1)[-1], prefix)
        if owner is None or (before is not None and (stored.mtime is None or stored.mtime >= before)):
            continue
        version, attempt = owner
        older = version < writer.version
        same_version_before_fence = (
            version == writer.version and attempt != writer.attempt
            and stored.mtime is not None and stored.mtime < fence_time
        )
        if older or same_version_before_fence:
            candidates.append(stored.uri)
    if not candidates:
        return []
    referenced = referenced_files(table)
    orphans = [uri for uri in candidates if normalize(uri) not in referenced]
    for uri in orphans:
        with contextlib.suppress(FileNotFoundError):  # its (fenced) writer may have discarded it meanwhile
            table.io.delete(uri)
    if orphans:
        log.info("%s: deleted %d leftover file(s) of earlier attempts (staged files, manifests of commits that "
                 "never landed)", writer.sink_id, len(orphans))
    return orphans
