"""A directory of JSON-lines, CSV or Parquet files, each ingested exactly once.

Files are taken in lexical order of their path relative to the directory; the frontier
``{"after": "<relative path>"}`` means every file whose relative path sorts at or before it is in
the table. In a sync of many tables (``table.name`` a template) each directory under the path is a stream
of its own, named by the directory, and the frontier holds one such position per directory:
``{"<directory>": {"after": "<path relative to it>"}}`` (files directly under the path are not read then). Name files so that new ones sort last (e.g. a timestamp or sequence prefix) and move
them into place atomically; names starting with ``.`` or ``_`` are ignored as in-progress.
A new file that sorts before the frontier cannot be told apart from an ingested one: it is
reported loudly (log and the commit's ``icebergsync.source-notes``), never ingested silently twice
or dropped silently.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from icebergsync.catalog import read_secret, resolve_env
from icebergsync.protocol import Frontier, SourceIdentity, encode_json
from icebergsync.spec import Column as SpecColumn
from icebergsync.storage import StoredFile, list_files, normalize
from icebergsync.transient import object_store
from spark_app.decoding.source_positions import Position
from spark_app.sources.base import Pending, Source
from spark_app.sources.file_lines import ChangeReading, FileReader, plan_file_units
from spark_app.sources.units import FileUnit, UnitReader, UnitStats, WorkUnit

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
        self._io_properties = {  # the job's FileIO (retried reads), unless the properties name another
            "py-io-impl": object_store.IMPL,
            **resolve_env(self.spec.table.catalog_or_default.properties, "spec.table.catalog.properties"),
            **read_secret(settings.secret_ref),
        }
        self._known: set[str] | None = None  # files at or before the frontier that are not late
        self._late_unnoted: list[str] = []  # late files not yet named in a commit's source notes
        self._io_root = self._root.replace("s3a://", "s3://", 1)
        self.per_directory = self.spec.table.is_template  # each directory a stream (a sync of many tables)

    def initial_frontier(self) -> Frontier:
        return {} if self.per_directory else {"after": ""}

    def identity(self) -> SourceIdentity:
        """The directory; in a sync of many tables also that its directories are the streams (a frontier of one
        shape is never read as the other)."""
        identity: SourceIdentity = {"kind": "files", "path": normalize(self._root)}
        return {**identity, "streams": "directories"} if self.per_directory else identity

    @staticmethod
    def check_frontier(frontier: Frontier) -> None:
        def position(value: object) -> bool:
            return isinstance(value, dict) and set(value) == {"after"} and isinstance(value["after"], str)

        if not (position(frontier) or all(position(value) for value in frontier.values())):
            raise ValueError('a files frontier is {"after": "<relative path>"}, or {"<directory>": {"after": '
                             '"<relative path>"}, …} in a sync of many tables')

    def _position(self, frontier: Frontier, rel: str) -> str:
        """Where ``rel``'s stream stands in ``frontier``: the relative path its files are taken after."""
        if not self.per_directory:
            return str(frontier.get("after", ""))
        return str((frontier.get(_directory(rel)) or {}).get("after", ""))

    def _after(self, frontier: Frontier, rel: str) -> bool:
        """Whether ``rel`` sorts after its stream's position in ``frontier`` (not ingested yet)."""
        return _within(rel) > self._position(frontier, rel) if self.per_directory else rel > self._position(frontier, rel)

    def _relative(self, stored: StoredFile) -> str:
        return normalize(stored.uri)[len(normalize(self._root)):].lstrip("/")

    def _listing(self) -> list[tuple[str, StoredFile]]:
        files = [(self._relative(f), f) for f in list_files(self._io_root, self._io_properties)]
        visible = [(rel, f) for rel, f in files if not any(part.startswith((".", "_")) for part in rel.split("/"))
                   and (not self.per_directory or "/" in rel)]
        return sorted(visible, key=lambda item: item[0])

    def streams(self) -> list[str] | None:
        return sorted({_directory(rel) for rel, _ in self._listing()}) if self.per_directory else []

    def stream_of(self, unit: WorkUnit) -> str | None:
        assert isinstance(unit, FileUnit)
        return _directory(normalize(unit.uri)[len(normalize(self._io_root)):].lstrip("/")) if self.per_directory else None

    def pending(self, frontier: Frontier, max_bytes: int) -> Pending | None:
        listing = self._listing()
        self._note_late_files(frontier, listing)
        new = [(rel, f) for rel, f in listing if self._after(frontier, rel)]
        if not new:
            return None
        if self.per_directory:  # the streams' files in turn: the first new file of each, then the second, …
            rank: dict[str, int] = {}
            order = []
            for rel, stored in new:
                rank[_directory(rel)] = rank.get(_directory(rel), -1) + 1
                order.append((rank[_directory(rel)], rel, stored))
            new = [(rel, stored) for _, rel, stored in sorted(order, key=lambda item: (item[0], item[1]))]
        chosen: list[tuple[str, StoredFile]] = []
        size = 0
        for rel, stored in new[: self.settings.max_files_per_trigger]:
            if chosen and size + stored.size > max_bytes:
                break
            chosen.append((rel, stored))
            size += stored.size
        chosen.sort(key=lambda item: item[0])
        notes = None
        if self._late_unnoted:
            notes = {"files-before-frontier": self._late_unnoted[:100],
                     "files-before-frontier-count": len(self._late_unnoted)}
        return Pending(end=self._end(frontier, chosen), estimated_bytes=size, lag=self._lag(new, chosen), notes=notes,
                       detail=chosen, full=len(chosen) == self.settings.max_files_per_trigger or len(chosen) < len(new))

    def _end(self, frontier: Frontier, chosen: list[tuple[str, StoredFile]]) -> Frontier:
        if not self.per_directory:
            return {"after": chosen[-1][0]}
        end = dict(frontier)
        for rel, _ in chosen:  # in path order: each directory ends at its last chosen file
            end[_directory(rel)] = {"after": _within(rel)}
        return end

    def _lag(self, new: list[tuple[str, StoredFile]], chosen: list[tuple[str, StoredFile]]) -> dict[str, Any]:
        """The files still waiting after a trigger (in a sync of many tables, also by directory)."""
        if not self.per_directory:
            return {"files": len(new) - len(chosen)}
        taken = {rel for rel, _ in chosen}
        waiting: dict[str, int] = {}
        for rel, _ in new:
            if rel not in taken:
                waiting[_directory(rel)] = waiting.get(_directory(rel), 0) + 1
        return {"files": sum(waiting.values()), "directories": waiting}

    def backlog(self, frontier: Frontier, pending: Pending | None,
                owns: Callable[[str], bool] | None = None) -> dict[str, Any]:
        """The files listed beyond the frontier and not committed: the range's and those after it."""
        if pending is None:
            return {"files": 0}
        seen = self.restricted(pending, owns) if owns is not None else pending
        return {"files": len(seen.detail) + (seen.lag or {}).get("files", 0)}

    def restricted(self, pending: Pending, owns: Callable[[str], bool]) -> Pending:
        chosen = [(rel, stored) for rel, stored in pending.detail if owns(_directory(rel))]
        waiting = {directory: count for directory, count in (pending.lag or {}).get("directories", {}).items()
                   if owns(directory)}
        notes = dict(pending.notes or {})
        if "files-before-frontier" in notes:
            late = [rel for rel in notes["files-before-frontier"] if owns(_directory(rel))]
            notes = {"files-before-frontier": late, "files-before-frontier-count": len(late)} if late else {}
        return dataclasses.replace(pending, detail=chosen, notes=notes or None,
                                   lag={"files": sum(waiting.values()), "directories": waiting})

    def _note_late_files(self, frontier: Frontier, listing: list[tuple[str, StoredFile]]) -> None:
        """Warn once about each new file that sorts at or before the frontier (it is NOT ingested).

        The files present at the first listing, and those this run ingested, are known; a file
        that appears later behind the frontier is late. Its note waits for the next commit.
        """
        behind = {rel for rel, _ in listing if not self._after(frontier, rel)}
        if self._known is None:
            self._known = behind
            return
        late = sorted(behind - self._known)
        if late:
            log.warning("files source: %d file(s) sort before the frontier %s and are NOT ingested "
                        "(rename them to sort after it): %s", len(late), encode_json(frontier), late[:10])
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

    def unit_reader(self, columns: list[SpecColumn], key: list[str] | None = None,
                    truncated_at: Position | None = None) -> UnitReader:
        header = tuple(c.name for c in columns) if self.settings.format == "csv" and self.settings.csv_header else None
        reading = ChangeReading.of(self.spec, columns, key, truncated_at)
        return FileReader(self._io_properties, self.settings.format, header, tuple(columns), reading)


def _directory(rel: str) -> str:
    """The stream of a file in a sync of many tables: the first directory of its relative path."""
    return rel.split("/", 1)[0]


def _within(rel: str) -> str:
    """A file's path relative to its stream's directory."""
    return rel.split("/", 1)[1] if "/" in rel else rel


