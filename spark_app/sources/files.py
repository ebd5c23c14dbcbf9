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

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from icebergsync.catalog import read_secret, resolve_env
from icebergsync.protocol import Frontier, SourceIdentity, encode_json
from icebergsync.schema import spark_ddl
from icebergsync.storage import StoredFile, list_files, normalize
from spark_app.decode import CORRUPT, conform_columns, decode_json
from spark_app.sources.base import Pending, Source, SourceBatch
from spark_app.writer import ERROR_COLUMN, POSITION_COLUMN, RAW_COLUMN

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
        root = self._root.replace("s3a://", "s3://", 1)
        files = [(self._relative(f), f) for f in list_files(root, self._io_properties)]
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
        paths = [spark_path(f"{self._root}/{name}") for name in names]
        columns = list(self.spec.schema_)
        position = F.to_json(F.struct(F.col("_metadata.file_path").alias("file")))
        reader = self.spark.read
        frame: DataFrame
        if self.settings.format == "json":
            lines = reader.text(paths).select("value", F.col("_metadata.file_path").alias("_file"))
            lines = lines.where(F.length(F.trim(F.col("value"))) > 0)
            frame = decode_json(lines, "value", columns, F.to_json(F.struct(F.col("_file").alias("file"))))
        elif self.settings.format == "csv":
            schema = f"{spark_ddl(columns)}, `{CORRUPT}` string"
            rows = reader.csv(paths, schema=schema, header=self.settings.csv_header, mode="PERMISSIVE",
                              columnNameOfCorruptRecord=CORRUPT, enforceSchema=False)
            frame = rows.select(
                *[F.col(f"`{c.name}`") for c in columns],
                F.when(F.col(CORRUPT).isNotNull(), F.lit("CSV row does not match the schema")).alias(ERROR_COLUMN),
                F.col(CORRUPT).alias(RAW_COLUMN),
                position.alias(POSITION_COLUMN),
            )
        else:
            rows = reader.parquet(*paths)
            frame = conform_columns(
                rows.select(*[F.col(f"`{name}`") for name in rows.columns if name in {c.name for c in columns}],
                            position.alias(POSITION_COLUMN)),
                columns, "the Parquet files",
            )
        # Keep only the relative path as the frontier; the file list is this commit's detail.
        end = {"after": pending.end["after"]}
        notes = dict(pending.notes or {})
        notes["files"] = encode_json(names) if len(names) <= 50 else f"{len(names)} files"
        return SourceBatch(frame=frame, end=end, lag=pending.lag, notes=notes)
