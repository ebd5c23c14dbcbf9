"""kill -9 the job at many points and restart it: the table ends with exactly the source rows.

Each run is a real ``icebergsync run`` process (its own driver JVM and Python workers). Planned
crashes hit the protocol's boundaries (right after the fence, after staging before the commit,
between the main and the dead-letter commit, right after a commit); unplanned ones SIGKILL the
whole process group at a random moment, usually while executors are staging.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from icebergsync.errors import EXIT_FENCED
from tests.integration.sync_support import (
    REPO,
    catalog_of,
    job_command,
    make_sync,
    run_job_process,
    sink_commits,
    sync_document,
    table_ids,
    unreferenced_sink_files,
    wait_while_running,
    write_spec,
)

TOTAL = 240_000


@pytest.mark.slow
def test_generator_sync_is_exactly_once_across_kill_9(tmp_path: Path) -> None:
    source = {"generator": {"rowsPerSecond": 60_000, "totalRows": TOTAL, "maxRowsPerTrigger": 25_000}}
    document = sync_document(tmp_path, source, commit={"interval": "500ms", "targetFileSize": "256Ki"})
    spec_path = write_spec(tmp_path, document)
    sync = make_sync(tmp_path, source)
    rng = random.Random(20261121)
    plan: list[tuple[int, str | None, float | None]] = [
        (1, "staged:2", None),        # staged the 2nd trigger, killed before its commit
        (1, "committed:1", None),     # killed right after a commit (same version restarts)
        (2, "fenced:1", None),        # killed right after fencing, before anything was staged
        (3, None, rng.uniform(9, 13)),  # killed at a random moment, usually mid-staging
        (3, "staged:1", None),
        (4, None, rng.uniform(9, 13)),
    ]
    for version, crash_at, kill_after in plan:
        status, log = run_job_process(spec_path, version, crash_at=crash_at, kill_after=kill_after)
        if status == 0:
            break  # a random kill may come after the (fast) job already finished
        assert status == -9, f"run v{version} {crash_at or 'random kill'} ended {status}:\n{log[-3000:]}"
        table = catalog_of(sync).load_table("sales.orders")
        ids = table_ids(table)
        assert len(ids) == len(set(ids)), "a crash made a row visible twice"
        frontier = sink_commits(table, "test/orders")[-1].frontier or {"next_id": 0}
        assert ids == list(range(frontier["next_id"])), "visible rows differ from what the frontier covers"
    status, log = run_job_process(spec_path, 5)
    assert status == 0, log[-3000:]
    table = catalog_of(sync).load_table("sales.orders")
    ids = table_ids(table)
    assert len(ids) == TOTAL and ids == list(range(TOTAL))
    assert unreferenced_sink_files(table, "test/orders") == [], "staged files of crashed attempts were left behind"
    commits = sink_commits(table, "test/orders")
    assert {1, 2, 3} <= {c.writer.version for c in commits}  # a random kill may come before v4's fence
    assert commits[-1].writer.version == 5


@pytest.mark.slow
def test_dead_letters_committed_to_main_are_recovered_after_a_crash(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    good = [json.dumps({"id": i}) for i in range(50)]
    (inbox / "001.json").write_text("\n".join([*good[:25], "{broken", '{"id": "x"}']))
    (inbox / "002.json").write_text("\n".join([*good[25:], "also broken"]))
    schema = [{"name": "id", "type": "long", "required": True}]
    source = {"files": {"path": str(inbox), "maxFilesPerTrigger": 1}}
    extra = {"schema": schema, "deadLetter": {"table": "sales.orders_dlq"}}
    spec_path = write_spec(tmp_path, sync_document(tmp_path, source, **extra))
    status, log = run_job_process(spec_path, 1, crash_at="main-committed:1", kill_after=120)
    assert status == -9, log[-3000:]
    catalog = catalog_of(make_sync(tmp_path, source, **extra))
    assert table_ids(catalog.load_table("sales.orders")) == list(range(25))
    assert catalog.load_table("sales.orders_dlq").scan().to_arrow().num_rows == 0, "dead letters are not yet committed"
    status, log = run_job_process(  # a file source never ends: stop it (SIGTERM) once both files are in
        spec_path, 2, stop_when=lambda: table_ids(catalog.load_table("sales.orders")) == list(range(50)))
    assert status == 0, log[-3000:]
    payloads = sorted(catalog.load_table("sales.orders_dlq").scan().to_arrow().column("payload").to_pylist())
    assert payloads == sorted(['{"id": "x"}', "{broken", "also broken"])


@pytest.mark.slow
def test_a_fenced_job_exits_75_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    source = {"generator": {"rowsPerSecond": 2_000}}
    spec_path = write_spec(tmp_path, sync_document(tmp_path, source, commit={"interval": "2s"}))
    sync = make_sync(tmp_path, source)

    def old_has_committed() -> bool:
        return len(sink_commits(catalog_of(sync).load_table("sales.orders"), "test/orders")) >= 3

    def new_has_committed() -> bool:
        return any(c.writer.version == 2 and c.kind == "data"
                   for c in sink_commits(catalog_of(sync).load_table("sales.orders"), "test/orders"))

    with ThreadPoolExecutor(1) as pool:
        old = pool.submit(run_job_process, spec_path, 1)
        wait_while_running(old, old_has_committed, "the old version's commits")
        status, _ = run_job_process(spec_path, 2, stop_when=new_has_committed)
        assert status == 0
        old_status, log = old.result(timeout=180)
    assert old_status == EXIT_FENCED, log[-3000:]
    fenced_lines = [line for line in log.splitlines() if "FENCED" in line]
    assert len(fenced_lines) == 1 and "version 1" in fenced_lines[0] and "version 2" in fenced_lines[0]
    table = catalog_of(sync).load_table("sales.orders")
    commits = sink_commits(table, "test/orders")
    new_fence = next(i for i, c in enumerate(commits) if c.writer.version == 2)
    assert all(c.writer.version == 2 for c in commits[new_fence:]), "the old version landed after the new fence"
    old_files = [uri for uri in unreferenced_sink_files(table, "test/orders") if "-v1-" in uri]
    assert old_files == [], "the fenced job left staged files behind"
    ids = table_ids(table)
    assert ids == list(range(len(ids)))


@pytest.mark.slow
def test_sigterm_during_start_up_stops_cleanly(tmp_path: Path) -> None:
    """A pod terminated while the job starts (its JVM, the catalog) exits 0 having written at most its fence."""
    source = {"generator": {"rowsPerSecond": 1_000}}
    spec_path = write_spec(tmp_path, sync_document(tmp_path, source))
    output = tmp_path / "job.log"
    with output.open("w") as sink:
        process = subprocess.Popen(job_command(spec_path, 1), cwd=REPO, stdout=sink, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYSPARK_PYTHON": sys.executable}, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while "starting " not in output.read_text():
                assert process.poll() is None and time.monotonic() < deadline, output.read_text()[-3000:]
                time.sleep(0.05)
            process.send_signal(signal.SIGTERM)  # the JVM has not started yet
            status = process.wait(120)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    log = output.read_text()
    assert status == 0, log[-3000:]
    assert "received signal 15" in log
    commits = sink_commits(catalog_of(make_sync(tmp_path, source)).load_table("sales.orders"), "test/orders")
    assert [c.kind for c in commits] == ["fence"]
