"""`icebergsync run` as a user runs it (a process of its own, local Spark, SQLite catalog): run without
--sink-version, it takes the version after the table's newest and resumes (even after a run at a higher
explicit version); a second spec pointed at the same table is refused (TableInUse) without writing, and
`status` of that spec says so on top."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from icebergsync.errors import EXIT_TABLE_IN_USE
from tests.integration.sync_support import (
    REPO,
    catalog_of,
    make_sync,
    run_job_process,
    sink_commits,
    sync_document,
    table_ids,
    write_spec,
)

ROWS = 300
GENERATOR = {"generator": {"rowsPerSecond": 1_000_000, "totalRows": ROWS, "maxRowsPerTrigger": 200}}
SINK = "test/orders"


@pytest.fixture(scope="module")
def synced_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table the spec ``orders`` synced once, run without --sink-version."""
    directory = tmp_path_factory.mktemp("cli-runs")
    spec = write_spec(directory, sync_document(directory, GENERATOR))
    status, output = run_job_process(spec, None)
    assert status == 0, output[-3000:]
    return spec


def versions(spec: Path) -> list[int]:
    """The sink versions of the table's commits of ``orders``, oldest first."""
    table = catalog_of(make_sync(spec.parent, GENERATOR)).load_table("sales.orders")
    return [commit.writer.version for commit in sink_commits(table, SINK)]


def test_a_run_without_a_version_takes_the_one_after_the_tables_newest_and_resumes(synced_once: Path) -> None:
    assert set(versions(synced_once)) == {1}, "a new table: version 1"
    status, output = run_job_process(synced_once, 3)
    assert status == 0, output[-3000:]
    status, output = run_job_process(synced_once, None)  # a default of 1 would be fenced (exit 75) forever
    assert status == 0, output[-3000:]
    assert "as sink version 4 (the one after the table's newest)" in output
    assert versions(synced_once)[-1] == 4, "version 4 committed (its fence)"
    table = catalog_of(make_sync(synced_once.parent, GENERATOR)).load_table("sales.orders")
    assert table_ids(table) == list(range(ROWS)), "resumed from the table: nothing twice"


def test_another_spec_on_the_same_table_is_refused_and_status_says_so(synced_once: Path) -> None:
    directory = synced_once.parent
    other = write_spec(directory, sync_document(directory, GENERATOR, name="other"))
    table_before = catalog_of(make_sync(directory, GENERATOR)).load_table("sales.orders")
    status, output = run_job_process(other, None)
    assert status == EXIT_TABLE_IN_USE, output[-3000:]
    refusal = output.strip().splitlines()[-1]
    assert "table sales.orders is written by sink test/orders, not test/other" in refusal
    assert "spec.sinkId orders (or metadata.name orders)" in refusal
    table = catalog_of(make_sync(directory, GENERATOR)).load_table("sales.orders")
    assert table.metadata.snapshots == table_before.metadata.snapshots, "nothing was written"
    assert table_ids(table) == list(range(ROWS))
    shown = subprocess.run([sys.executable, "-m", "spark_app.cli", "status", str(other)], cwd=REPO,
                           capture_output=True, text=True, timeout=120, check=True).stdout
    assert shown.splitlines()[0].startswith("WARNING: table sales.orders is written by sink test/orders, not test/other")
