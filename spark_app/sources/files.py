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
from functools import reduce
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO, load_file_io
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from icebergsync.catalog import read_secret, resolve_env
from icebergsync.protocol import Frontier, SourceIdentity, encode_json
from icebergsync.schema import spark_type
from icebergsync.spec import Column as SpecColumn
from icebergsync.storage import StoredFile, list_files, normalize
from spark_app.deadletter import POSITION_COLUMN, whole_input_rows
from spark_app.decode import conform_columns, decode_csv, decode_json
from spark_app.sources.base import Pending, Source, SourceBatch
from spark_app.sources.file_lines import LineReading, read_lines

log = logging.getLogger("icebergsync.source.files")


# pyiceberg FileIO property -> Hadoop S3A setting: one set of S3 settings serves both readers.
S3A_SETTINGS = {
    "s3.endpoint": "fs.s3a.endpoint",
    "s3.access-key-id": "fs.s3a.access.key",
    "s3.secret-access-key": "fs.s3a.secret.key",
    "s3.session-token": "fs.s3a.session.token",
    "s3.region": "fs.s3a.endpoint.region",
    "s3.path-style-access": "fs.s3a.path.style.access",
}


def s3a_settings(properties: dict[str, str]) -> dict[str, str]:
    """Hadoop S3A settings equivalent to the S3 FileIO properties the spec and its secret give."""
    settings = {S3A_SETTINGS[key]: value for key, value in properties.items() if key in S3A_SETTINGS}
    if properties.get("s3.endpoint", "").startswith("http://"):
        settings["fs.s3a.connection.ssl.enabled"] = "false"
    return settings


def spark_path(uri: str) -> str:
    """Spark reads S3 through the s3a connector."""
    return "s3a://" + uri.removeprefix("s3://") if uri.startswith("s3://") else uri


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
            **resolve_env(self.spec.table.catalog.properties, "spec.table.catalog.properties"),
            **read_secret(settings.secret_ref),
        }
        if self._root.startswith(("s3://", "s3a://")):
            hadoop = self.spark.sparkContext._jsc.hadoopConfiguration()
            for key, value in s3a_settings(self._io_properties).items():
                hadoop.set(key, value)
        self._reported_late: set[str] = set()
        self._io_root = self._root.replace("s3a://", "s3://", 1)
        self._file_io: FileIO | None = None

    def _io(self, uri: str) -> FileIO:
        if self._file_io is None:
            self._file_io = load_file_io(self._io_properties, uri)
        return self._file_io

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
        late = [rel for rel, _ in listing if rel <= after and rel not in self._reported_late]
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
        if late:
            log.warning("files source: %d file(s) sort before the frontier %r and are NOT ingested "
                        "(rename them to sort after it): %s", len(late), after, late[:10])
            self._reported_late.update(late)
            notes = {"files-before-frontier": late[:100], "files-before-frontier-count": len(late)}
        return Pending(
            end={"after": chosen[-1][0], "files": [rel for rel, _ in chosen]},
            estimated_bytes=size,
            lag={"files": len(new) - len(chosen)},
            notes=notes,
        )

    def read(self, frontier: Frontier, pending: Pending) -> SourceBatch:
        names = list(pending.end["files"])
        uris = [f"{self._io_root}/{name}" for name in names]
        columns = list(self.spec.schema_)
        frame: DataFrame
        if self.settings.format == "parquet":
            frame = self._read_parquet(uris, columns)
        else:
            header = tuple(c.name for c in columns) if self.settings.format == "csv" and self.settings.csv_header else None
            lines = read_lines(self.spark, uris, LineReading(self._io_properties, header),
                               self.parallelism(pending.estimated_bytes))
            decode = decode_csv if self.settings.format == "csv" else decode_json
            frame = decode(lines, "value", columns, F.to_json(F.struct(F.col("file"), F.col("line"))))
        # Keep only the relative path as the frontier; the file list is this commit's detail.
        end = {"after": pending.end["after"]}
        notes = dict(pending.notes or {})
        notes["files"] = encode_json(names) if len(names) <= 50 else f"{len(names)} files"
        return SourceBatch(frame=frame, end=end, lag=pending.lag, notes=notes)

    def _read_parquet(self, uris: list[str], columns: list[SpecColumn]) -> DataFrame:
        """Read the Parquet files, one Spark read per distinct file schema (no schema merging across files);
        a file that is not Parquet, has a column the spec does not declare, or a column that cannot be
        cast to its declared type becomes ONE dead letter instead of failing the trigger."""
        declared = {c.name: c for c in columns}
        failures: list[tuple[str, dict[str, object]]] = []
        groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
        for uri in uris:
            try:
                with self._io(uri).new_input(uri).open() as stream:
                    schema = pq.read_schema(stream)
            except pa.ArrowInvalid as exc:
                failures.append((f"not a Parquet file: {exc}", {"file": uri}))
                continue
            unknown = [name for name in schema.names if name not in declared]
            if unknown:
                failures.append((f"Parquet file has columns that spec.schema does not declare: {unknown}", {"file": uri}))
                continue
            groups.setdefault(tuple((f.name, str(f.type)) for f in schema), []).append(uri)
        frames = []
        for group, members in groups.items():
            rows = self.spark.read.parquet(*[spark_path(uri) for uri in members])
            position = F.to_json(F.struct(F.col("_metadata.file_path").alias("file"),
                                          F.col("_metadata.row_index").alias("row")))
            mismatched = [problem for name, _ in group if (problem := _cast_problem(rows, declared[name])) is not None]
            if mismatched:
                failures += [(f"Parquet column(s) cannot be read as declared: {'; '.join(mismatched)}", {"file": uri})
                             for uri in members]
                continue
            frames.append(conform_columns(
                rows.select(*[F.col(f"`{name}`") for name, _ in group], position.alias(POSITION_COLUMN)),
                columns, "the Parquet files"))
        if failures:
            frames.append(whole_input_rows(self.spark, columns, failures))
        return reduce(DataFrame.unionByName, frames)


def _cast_problem(frame: DataFrame, column: SpecColumn) -> str | None:
    """Why a column of ``frame`` cannot be cast to the declared type at all (values that do not fit are per-row errors)."""
    try:
        frame.select(F.col(f"`{column.name}`").try_cast(spark_type(column.type))).schema  # noqa: B018 - analyse only
    except AnalysisException:
        return f"{column.name} is {frame.schema[column.name].dataType.simpleString()}, not a {column.type}"
    return None
