"""A directory of JSON-lines, CSV or Parquet files, each ingested exactly once.

Files are taken in lexical order of their path relative to the directory; the frontier
``{"after": "<relative path>"}`` means every file whose relative path sorts at or before it is in
the table. Name files so that new ones sort last (e.g. a timestamp or sequence prefix) and move
them into place atomically; names starting with ``.`` or ``_`` are ignored as in-progress.
A new file that sorts before the frontier cannot be told apart from an ingested one: it is
reported loudly (log and the commit's ``icebergsync.source-notes``), never ingested silently twice
or dropped silently.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from icebergsync.catalog import read_secret, resolve_env
from icebergsync.protocol import Frontier, SourceIdentity, encode_json
from icebergsync.spec import Column as SpecColumn
from icebergsync.storage import StoredFile, list_files, normalize
from spark_app.sources.base import Pending, Source
from spark_app.sources.file_lines import ChangeReading, FileReader, plan_file_units
from spark_app.units import UnitReader, UnitStats, WorkUnit

log = logging.getLogger("icebergsync.source.files")


class FilesSource(Source):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        settings = self.spec.source.files
        assert settings is not None
        self.settings = settings
        self._root = settings.path.rstrip("/")
        if "://" not in self._root:
            self._root = Path(self._root).expanduser().resolve().as_uri()
        self._io_properties = {
            **resolve_env(self.spec.table.catalog_or_default.properties, "spec.table.catalog.properties"),
            **read_secret(settings.secret_ref),
        }
        self._known: set[str] | None = None  # files at or before the frontier that are not late
        self._late_unnoted: list[str] = []  # late files not yet named in a commit's source notes
        self._io_root = self._root.replace("s3a://", "s3://", 1)

    def initial_frontier(self) -> Frontier:
        return {"after": ""}

    def identity(self) -> SourceIdentity:
        return {"kind": "files", "path": normalize(self._root)}

    @staticmethod
    def check_frontier(frontier: Frontier) -> None:
        if set(frontier) != {"after"} or not isinstance(frontier["after"], str):
            raise ValueError('a files frontier is {"after": "<relative path>"}')

    def _relative(self, stored: StoredFile) -> str:
        return normalize(stored.uri)[len(normalize(self._root)):].lstrip("/")

    def _listing(self) -> list[tuple[str, StoredFile]]:
        files = [(self._relative(f), f) for f in list_files(self._io_root, self._io_properties)]
        visible = [(rel, f) for rel, f in files if not any(part.startswith((".", "_")) for part in rel.split("/"))]
        return sorted(visible, key=lambda item: item[0])

    def pending(self, frontier: Frontier, max_bytes: int) -> Pending | None:
        after = str(frontier.get("after", ""))
        listing = self._listing()
        self._note_late_files(after, listing)
        new = [(rel, f) for rel, f in listing if rel > after]
        if not new:
            return None
        chosen: list[tuple[str, StoredFile]] = []
        size = 0
        for rel, stored in new[: self.settings.max_files_per_trigger]:
            if chosen and size + stored.size > max_bytes:
                break
            chosen.append((rel, stored))
            size += stored.size
        notes = None
        if self._late_unnoted:
            notes = {"files-before-frontier": self._late_unnoted[:100],
                     "files-before-frontier-count": len(self._late_unnoted)}
        return Pending(end={"after": chosen[-1][0]}, estimated_bytes=size, lag={"files": len(new) - len(chosen)},
                       notes=notes, detail=chosen,
                       full=len(chosen) == self.settings.max_files_per_trigger or len(chosen) < len(new))

    def _note_late_files(self, after: str, listing: list[tuple[str, StoredFile]]) -> None:
        """Warn once about each new file that sorts at or before the frontier (it is NOT ingested).

        The files present at the first listing, and those this run ingested, are known; a file
        that appears later behind the frontier is late. Its note waits for the next commit.
        """
        behind = {rel for rel, _ in listing if rel <= after}
        if self._known is None:
            self._known = behind
            return
        late = sorted(behind - self._known)
        if late:
            log.warning("files source: %d file(s) sort before the frontier %r and are NOT ingested "
                        "(rename them to sort after it): %s", len(late), after, late[:10])
            self._known |= set(late)
            self._late_unnoted += late

    def plan_units(self, frontier: Frontier, pending: Pending) -> list[WorkUnit]:
        chosen: list[tuple[str, StoredFile]] = pending.detail
        if self._known is not None:
            self._known |= {rel for rel, _ in chosen}
        uris = [(f"{self._io_root}/{rel}", stored.size) for rel, stored in chosen]
        return plan_file_units(uris, self.settings.format, self.cores())

    def trigger_notes(self, pending: Pending, stats: UnitStats) -> dict[str, Any] | None:
        names = [rel for rel, _ in pending.detail]
        notes = super().trigger_notes(pending, stats) or {}
        notes["files"] = encode_json(names) if len(names) <= 50 else f"{len(names)} files"
        self._late_unnoted = [rel for rel in self._late_unnoted if rel not in notes.get("files-before-frontier", [])]
        return notes

    def unit_reader(self, columns: list[SpecColumn], key: list[str] | None = None) -> UnitReader:
        header = tuple(c.name for c in columns) if self.settings.format == "csv" and self.settings.csv_header else None
        reading = ChangeReading.of(self.spec, columns, key)
        return FileReader(self._io_properties, self.settings.format, header, tuple(columns), reading)
