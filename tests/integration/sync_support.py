"""Helpers for tests that run the real job: spec documents, running it, reading the table back."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

from icebergsync import protocol
from icebergsync.catalog import open_catalog
from icebergsync.protocol import sink_file_prefix
from icebergsync.source_settings.checks import SettingsVerdict, newest_data_notes, settings_verdict
from icebergsync.spec import IcebergSync, parse_spec
from icebergsync.storage import list_files, normalize
from spark_app.commit.references import referenced_files
from tests.integration.previous_release import release_environment

REPO = Path(__file__).resolve().parents[2]


def sync_document(directory: Path, source: dict[str, Any], name: str = "orders", **spec: Any) -> dict[str, Any]:
    """An IcebergSync document writing to a SQLite catalog and warehouse under ``directory``."""
    body: dict[str, Any] = {
        "source": source,
        "table": {
            "catalog": {"type": "sql", "uri": f"sqlite:///{directory}/catalog.db", "warehouse": str(directory / "warehouse")},
            "name": "sales.orders",
        },
        "commit": {"interval": "1s", "pollInterval": "200ms", "targetFileSize": "8Mi"},
    }
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return {"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
            "metadata": {"name": name, "namespace": "test"}, "spec": body}


def make_sync(directory: Path, source: dict[str, Any], **spec: Any) -> IcebergSync:
    return parse_spec(sync_document(directory, source, **spec))


def write_spec(directory: Path, document: dict[str, Any]) -> Path:
    path = directory / f"{document['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def catalog_of(sync: IcebergSync) -> Catalog:
    return open_catalog(sync.spec.table.catalog_or_default)


def source_settings(document: dict[str, Any], tables: list[str]) -> SettingsVerdict:
    """What the newest data commits of the sync on ``tables`` say of the documented Debezium settings (the
    ``SourceSettings`` condition and ``icebergsync status`` read the same)."""
    sync = parse_spec(document)
    catalog = catalog_of(sync)
    return settings_verdict((name, newest_data_notes(catalog.load_table(name).metadata, sync.sink_id))
                            for name in tables)


def table_ids(table: Table, column: str = "id") -> list[int]:
    return sorted(table.scan(selected_fields=(column,)).to_arrow().column(column).to_pylist())


def sink_commits(table: Table, sink_id: str) -> list[protocol.SinkCommit]:
    """The sink's commits on main, oldest first."""
    commits = [protocol.parse_commit(s) for s in protocol.main_ancestry(table.metadata)]
    return [c for c in reversed(commits) if c is not None and c.writer.sink_id == sink_id]


def unreferenced_sink_files(table: Table, sink_id: str) -> list[str]:
    """Files of this sink under the table's data directory that no snapshot references."""
    referenced = referenced_files(table)
    prefix = sink_file_prefix(sink_id)
    return [
        f.uri for f in list_files(table.metadata.location + "/data", table.io.properties)
        if f.uri.rsplit("/", 1)[-1].startswith(prefix) and normalize(f.uri) not in referenced
    ]


def data_file_rows(table: Table) -> list[tuple[Any, Any]]:
    """(DataFile, its rows as an Arrow table) for each live data file."""
    result = []
    for task in table.scan().plan_files():
        path = task.file.file_path
        with table.io.new_input(path).open() as stream:
            result.append((task.file, pq.read_table(stream)))
    return result


def job_command(spec_path: Path, version: int | None) -> list[str]:
    """``icebergsync run`` of the spec as ``version`` (None: the CLI's default, the one after the table's newest)."""
    given = ["--sink-version", str(version)] if version is not None else []
    return [sys.executable, "-m", "spark_app.cli", "run", str(spec_path), *given, "--master", "local[2]"]


@contextlib.contextmanager
def job_process(spec_path: Path, version: int | None, crash_at: str | None = None, code: Path | None = None
                ) -> Iterator[tuple[subprocess.Popen[Any], Path]]:
    """``icebergsync run`` in its own process group, its output in a log next to the spec; ``crash_at``
    sets ``ICEBERGSYNC_CRASH_AT``; ``code``: the job code of another release (tests/integration/previous_release.py)
    instead of today's. On leaving, the whole group is SIGKILLed and reaped: the JVM is a child of the Python driver,
    and no part of the job may survive it."""
    env = {**(os.environ if code is None else release_environment(code)), "PYSPARK_PYTHON": sys.executable}
    env.pop("ICEBERGSYNC_CRASH_AT", None)
    if crash_at:
        env["ICEBERGSYNC_CRASH_AT"] = crash_at
    output = spec_path.with_suffix(f".v{version}.{time.monotonic_ns()}.log")
    with output.open("w") as sink:
        process = subprocess.Popen(job_command(spec_path, version), cwd=code or REPO, env=env, stdout=sink,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield process, output
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def run_job_process(spec_path: Path, version: int | None, *, crash_at: str | None = None, kill_after: float | None = None,
                    stop_when: Callable[[], bool] | None = None, timeout: float = 240) -> tuple[int, str]:
    """Run ``icebergsync run`` in a subprocess and return (exit status, output); SIGKILL shows as -9.

    ``kill_after`` SIGKILLs the whole process group after that many seconds; ``stop_when`` is polled
    and, once true, the job gets SIGTERM (a clean stop) instead.
    """
    with job_process(spec_path, version, crash_at) as (process, output):
        started = time.monotonic()
        while process.poll() is None:
            elapsed = time.monotonic() - started
            if elapsed > timeout:
                raise AssertionError(f"job v{version} still running after {timeout}s:\n{output.read_text()[-3000:]}")
            if kill_after is not None and elapsed >= kill_after:
                os.killpg(process.pid, signal.SIGKILL)
            elif stop_when is not None and holds(stop_when):
                process.send_signal(signal.SIGTERM)
                stop_when = None
            time.sleep(0.25)
    return process.returncode, output.read_text()


def kill_after_first_commit(spec_path: Path, committed: Callable[[], bool], meanwhile: Callable[[], None] = lambda: None,
                            *, version: int = 1, timeout: float = 240, code: Path | None = None) -> None:
    """Run ``icebergsync run`` (``version``; the job code under ``code``, by default today's) in a process of its own,
    calling ``meanwhile`` about once a second, and SIGKILL its process group as soon as ``committed()`` holds (its
    first data commit landed)."""
    with job_process(spec_path, version, code=code) as (process, log):
        deadline = time.monotonic() + timeout
        while not holds(committed):
            assert process.poll() is None, f"the job ended before its first commit:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no data commit within {timeout:.0f} s:\n{log.read_text()[-3000:]}"
            meanwhile()
            time.sleep(1)
        os.killpg(process.pid, signal.SIGKILL)
        assert process.wait(30) == -signal.SIGKILL


def holds(predicate: Callable[[], bool]) -> bool:
    """``predicate()``, where a table (or its namespace) that does not exist yet counts as false."""
    try:
        return predicate()
    except (NoSuchTableError, NoSuchNamespaceError):
        return False


class BackgroundJob:
    """Run a SyncJob in a thread; ``stop()`` requests a clean stop and re-raises the job's error."""

    def __init__(self, job: Any):
        self.job = job
        self.error: BaseException | None = None
        self.summary: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.summary = self.job.run()
        except BaseException as exc:  # handed to the test thread by stop()
            self.error = exc

    def __enter__(self) -> BackgroundJob:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.job.stop_requested.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the job did not stop within 120 s"
        if self.error is not None:
            raise self.error

    def wait_until(self, predicate: Callable[[], bool], what: str, timeout: float = 90) -> None:
        """Poll ``predicate`` until true; fail fast if the job died, or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            if self.error is not None:
                raise AssertionError(f"the job failed while waiting for {what}") from self.error
            if holds(predicate):
                return
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)


def wait_while_running(job: Future[Any], predicate: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """Poll ``predicate`` until true; fail if the background ``job`` ended first, or after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not holds(predicate):
        assert not job.done(), f"the job ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def unreferenced_files(table: Table, io_properties: dict[str, str]) -> list[str]:
    """Every file under the table's location that neither its metadata nor any of its snapshots references: metadata
    files (current and logged), manifest lists, manifests, data and delete files (deleted entries included)."""
    referenced = {normalize(table.metadata_location), *(normalize(m.metadata_file) for m in table.metadata.metadata_log)}
    referenced |= referenced_files(table)
    for snapshot in table.metadata.snapshots:
        referenced.add(normalize(snapshot.manifest_list))
        referenced |= {normalize(manifest.manifest_path) for manifest in snapshot.manifests(table.io)}
    referenced |= {normalize(statistics.statistics_path) for statistics in table.metadata.statistics}
    return sorted(f.uri for f in list_files(table.metadata.location, io_properties) if normalize(f.uri) not in referenced)
