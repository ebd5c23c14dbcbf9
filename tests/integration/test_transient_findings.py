"""Transient faults the job once failed on, each through a fault proxy aimed at it (tests/integration/fault_proxy.py), the job in this
process's Spark against the REST catalog and MinIO. The job's code before commit 7824887 fails each one:

* a table load answered 429 (``Retry-After: 1``): waited out, the next attempt no sooner than it says;
* ``ensure_table`` at start-up: its create answered 503, then applied with the answer lost: create-or-load again;
* a lost answer to ``CompleteMultipartUpload``: of an executor's large data file (the object is complete: taken for
  done), and of a driver's manifest (small objects are ONE ``PutObject``: no multipart upload to lose);
* upkeep's load of the table (its snapshot count) failing after the REST retries: the sync goes on;
* ``discard()`` of a trigger staged ahead, at a stop, loading the table under 429s.

And, failed by the code before commit 0b06677: an S3 error answer (SlowDown, 429, 500, 503) to a read of a range shorter
than the answer's body, which the AWS SDK cannot read (Arrow reads the range into a buffer of its size, the SDK writes
the body there: ``INTERNAL_FAILURE``, "Failed to flush response stream", repeated by no SDK retry strategy): a 50-byte
range and a small Parquet file's column chunk read through the job's FileIO, and a keyed sync whose every such read
(its small change files on S3, the executors' reads of small column chunks) meets one first.
"""

from __future__ import annotations

import os
import random
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from spark_app.job.loop import RunSummary, SyncJob
from tests.infra.services import RestCatalog, S3Server
from tests.integration.fault_proxy import (
    REFUSALS,
    SHORT_READ_REFUSED,
    FaultPlan,
    FaultProxy,
    Request,
    Weather,
    after,
    first_of_each,
    lands_data,
    short_read,
    weather,
)
from tests.integration.keyed_support import KEY, ChangeStream, pyiceberg_rows, write_change_files
from tests.integration.keyed_support import SCHEMA as KEYED_SCHEMA
from tests.integration.sync_support import BackgroundJob, make_sync, sink_commits, unreferenced_sink_files

SEED = int(os.environ.get("ICEBERGSYNC_FAULT_SEED") or random.SystemRandom().randrange(2**31))
SCHEMA = [{"name": "id", "type": "long", "required": True}]


def generator(rows: int, per_trigger: int) -> dict[str, Any]:
    return {"generator": {"rowsPerSecond": 10_000_000, "totalRows": rows, "maxRowsPerTrigger": per_trigger}}


def loads_table(namespace: str) -> Callable[[Request], bool]:
    """A load of ``<namespace>.orders``."""
    return lambda request: request.method == "GET" and f"/namespaces/{namespace}/tables/orders" in request.path


def creates_table(request: Request) -> bool:
    return request.method == "POST" and request.path.endswith("/tables")


def completes_upload(under: str) -> Callable[[Request], bool]:
    """A ``CompleteMultipartUpload`` of an object in a ``<under>/`` directory."""
    return lambda request: request.method == "POST" and "uploadId=" in request.path and f"/{under}/" in request.path


def synced(tmp_path: Path, spark: SparkSession, found: Weather, source: dict[str, Any], namespace: str,
           **spec: Any) -> RunSummary:
    """The job, version 1, over the bounded ``source`` into ``<namespace>.orders`` through ``found``'s proxies."""
    spec.setdefault("schema", SCHEMA)
    sync = make_sync(tmp_path, source, table={"catalog": found.spec_catalog, "name": f"{namespace}.orders",
                                              **spec.pop("table", {})}, **spec)
    return SyncJob(sync, 1, spark).run()


def ids_once(table: Table, count: int) -> None:
    """``table`` holds the ids ``0 .. count-1``, each once."""
    ids = table.scan(selected_fields=("id",)).to_arrow().column("id")
    assert len(ids) == count and pc.count_distinct(ids).as_py() == count
    assert pc.min(ids).as_py() == 0 and pc.max(ids).as_py() == count - 1


@pytest.fixture
def namespace() -> str:
    return f"findings_{uuid.uuid4().hex[:8]}"


def test_a_table_load_answered_429_waits_its_retry_after(tmp_path: Path, spark: SparkSession, namespace: str,
                                                          rest_catalog_s3: RestCatalog, s3_server: S3Server) -> None:
    with weather(rest_catalog_s3, s3_server, SEED, catalog=(FaultPlan(SEED, ("429",), applies=loads_table(namespace), limit=3),),
                 store=()) as found:
        summary = synced(tmp_path, spark, found, generator(20_000, 5_000), namespace)
    assert summary.records == 20_000 and found.catalog.injected["429"] == 3
    ids_once(rest_catalog_s3.load().load_table(f"{namespace}.orders"), 20_000)
    log = found.catalog.log
    for index, (at, method, path, kind) in enumerate(log):
        if kind == "429":
            again = next(later for later, m, p, _ in log[index + 1:] if (m, p) == (method, path))
            assert again - at >= 0.95, f"{method} {path} sent again {again - at:.2f} s after a 429 with Retry-After: 1"


def test_a_create_answered_503_then_lost_at_start_up_is_created_or_loaded_again(
        tmp_path: Path, spark: SparkSession, namespace: str, rest_catalog_s3: RestCatalog, s3_server: S3Server) -> None:
    plans = (FaultPlan(SEED, ("503",), applies=creates_table, limit=1),
             FaultPlan(SEED, ("dropped",), applies=creates_table, limit=1))
    with weather(rest_catalog_s3, s3_server, SEED, catalog=plans, store=()) as found:
        summary = synced(tmp_path, spark, found, generator(10_000, 5_000), namespace)
    assert summary.records == 10_000 and found.catalog.injected == {"503": 1, "dropped": 1}
    ids_once(rest_catalog_s3.load().load_table(f"{namespace}.orders"), 10_000)


@pytest.mark.parametrize(("under", "rows", "schema"), [("data", 500_000, []), ("metadata", 10_000, SCHEMA)],
                         ids=["executor-data-file", "driver-manifest"])
def test_a_lost_answer_to_complete_multipart_upload_is_taken_for_the_upload_it_completed(
        tmp_path: Path, spark: SparkSession, namespace: str, rest_catalog_s3: RestCatalog, s3_server: S3Server,
        under: str, rows: int, schema: list[dict[str, Any]]) -> None:
    """The first ``CompleteMultipartUpload`` answer under ``data/`` (data files larger than a part: the generator's
    every column, no schema declared, uncompressed, one trigger) or ``metadata/`` (manifests, manifest lists) is lost
    after the store applied it; the SDK's retry is told ``NoSuchUpload``."""
    lost = (FaultPlan(SEED, ("dropped",), applies=completes_upload(under), limit=1),)
    with weather(rest_catalog_s3, s3_server, SEED, catalog=(), store=lost) as found:
        summary = synced(tmp_path, spark, found, generator(rows, rows), namespace, schema=schema,
                         commit={"targetFileSize": "256Mi"},
                         table={"properties": {"write.parquet.compression-codec": "uncompressed"}})
    assert summary.records == rows
    table = rest_catalog_s3.load().load_table(f"{namespace}.orders")
    ids_once(table, rows)
    multipart = [path for _, method, path, _ in found.store.log if method == "POST" and f"/{under}/" in path]
    if under == "data":
        assert found.store.injected["dropped"] == 1, found.store.report("object store")
    else:  # a manifest is small: one PutObject, no multipart upload to lose
        assert multipart == [] and found.store.total == 0, multipart
    assert unreferenced_sink_files(table, "test/orders") == []


def test_upkeep_whose_table_load_fails_does_not_stop_the_sync(tmp_path: Path, spark: SparkSession, namespace: str,
                                                               rest_catalog_s3: RestCatalog, s3_server: S3Server) -> None:
    """After the first data commit, upkeep's load of the table (is ``maxSnapshots`` exceeded?) meets 503s with
    ``Retry-After: 1`` for longer than the REST retries last (9 answers): that step fails, the sync goes on."""
    after_commit = (FaultPlan(SEED, ("503",), applies=after(lands_data, loads_table(namespace)), limit=9, run=9),)
    only_expiry = {"compaction": {"enabled": False}, "rewriteDeletes": {"enabled": False},
                   "rewriteManifests": {"enabled": False}, "removeOrphans": {"enabled": False},
                   "expireSnapshots": {"enabled": True}}
    with weather(rest_catalog_s3, s3_server, SEED, catalog=after_commit, store=()) as found:
        summary = synced(tmp_path, spark, found, generator(15_000, 5_000), namespace, maintenance=only_expiry)
    assert found.catalog.injected["503"] == 9
    assert summary.records == 15_000 and summary.upkeep.failures == 1
    ids_once(rest_catalog_s3.load().load_table(f"{namespace}.orders"), 15_000)


def test_a_discard_at_a_stop_rides_out_429s(tmp_path: Path, spark: SparkSession, namespace: str,
                                            rest_catalog_s3: RestCatalog, s3_server: S3Server) -> None:
    """Stopped after its first commit with the next trigger staged ahead, the job discards it; the table loads from
    then on meet 429s (``Retry-After: 1``)."""
    stopping = threading.Event()
    plan = FaultPlan(SEED, ("429",), applies=lambda request: stopping.is_set() and loads_table(namespace)(request), limit=3)
    with weather(rest_catalog_s3, s3_server, SEED, catalog=(plan,), store=()) as found:
        sync = make_sync(tmp_path, {"generator": {"rowsPerSecond": 20_000, "maxRowsPerTrigger": 5_000}}, schema=SCHEMA,
                         table={"catalog": found.spec_catalog, "name": f"{namespace}.orders"})
        direct = rest_catalog_s3.load()
        with BackgroundJob(SyncJob(sync, 1, spark)) as running:
            running.wait_until(lambda: any(c.kind == "data" for c in sink_commits(direct.load_table(f"{namespace}.orders"), "test/orders")),
                               "the first data commit")
            stopping.set()
        summary = running.summary
    assert found.catalog.injected["429"] >= 1, found.catalog.report("catalog")
    table = direct.load_table(f"{namespace}.orders")
    ids_once(table, summary.records)
    assert unreferenced_sink_files(table, "test/orders") == []


def test_a_listing_answered_503_more_often_than_arrows_default_retries_is_retried(s3_server: S3Server) -> None:
    """Listing a directory (the files source's discovery, start-up cleanup) rides out as many 503s in a row as any
    other call of the job (Arrow's own default gives up after 3 attempts)."""
    from icebergsync.storage import list_files

    under = f"s3://{s3_server.bucket}/findings/{uuid.uuid4().hex}"
    for name in ("a", "b"):
        with s3_server.filesystem().open_output_stream(f"{under[5:]}/{name}") as out:
            out.write(b"x")
    lists = FaultPlan(SEED, ("503",), applies=lambda request: request.method == "GET" and "list-type=2" in request.path,
                      limit=5, run=5)
    with FaultProxy(s3_server.endpoint, lists, s3=True) as proxy:
        found = list_files(under, {**s3_server.fileio_properties, "s3.endpoint": f"http://{proxy.address}"})
    assert sorted(f.uri.rsplit("/", 1)[1] for f in found) == ["a", "b"]
    assert proxy.total == 5


def test_a_short_ranged_read_answered_slowdown_is_retried(s3_server: S3Server) -> None:
    """The job's FileIO reads a range of 50 bytes, then a small Parquet file (its footer and column chunk: two reads)
    through a proxy that answers each read shorter than an S3 error answer with one first (SlowDown, then 429...)."""
    # imported here: the module's other tests run on the code before commit 7824887 too, which has no such module
    from icebergsync.transient.object_store import RetryingFileIO

    path, parquet = (f"s3://{s3_server.bucket}/findings/{uuid.uuid4().hex}{suffix}" for suffix in ("", ".parquet"))
    io = RetryingFileIO(s3_server.fileio_properties)
    with io.new_output(path).create() as out:
        out.write(b"x" * 1000)
    with io.new_output(parquet).create() as out:
        pq.write_table(pa.table({"id": [1, 2, 3]}), out)
    refused = FaultPlan(SEED, REFUSALS, applies=first_of_each(short_read), run=10**9, each=True)
    with FaultProxy(s3_server.endpoint, refused, s3=True) as proxy:
        io = RetryingFileIO({**s3_server.fileio_properties, "s3.endpoint": f"http://{proxy.address}"})
        with io.new_input(path).open() as stream:
            assert stream.read_at(50, 100) == b"x" * 50
        with io.new_input(parquet).open() as stream:
            assert pq.ParquetFile(stream).read().column("id").to_pylist() == [1, 2, 3]
    assert proxy.injected[SHORT_READ_REFUSED] == proxy.total == 2, proxy.injected  # the range, the column chunk


def test_a_keyed_sync_whose_every_short_read_is_answered_an_error_first_rides_it_out(
        tmp_path: Path, spark: SparkSession, namespace: str, rest_catalog_s3: RestCatalog, s3_server: S3Server) -> None:
    """Four change files of two upserts each (about 150 bytes), on S3, into a keyed format-version 3 table: every read
    of fewer bytes than an S3 error answer — the executors' reads of the change files, of the key column chunks of the
    table's files (the key index) and of the small files copy-on-write writes again — meets an error answer first
    (SlowDown, 429, 500, 503 in turn)."""
    stream = ChangeStream("upsert", random.Random(SEED))
    write_change_files(tmp_path / "inbox", stream, 4, 2)
    inbox = f"{s3_server.bucket}/inbox-{namespace}"
    store = s3_server.filesystem()
    for change_file in sorted((tmp_path / "inbox").iterdir()):
        store.create_dir(inbox)
        with store.open_output_stream(f"{inbox}/{change_file.name}") as out:
            out.write(change_file.read_bytes())
    refused = (FaultPlan(SEED, REFUSALS, applies=first_of_each(short_read), run=10**9, each=True),)
    with weather(rest_catalog_s3, s3_server, SEED, catalog=(), store=refused) as found:
        sync = make_sync(tmp_path, {"files": {"path": f"s3://{inbox}", "maxFilesPerTrigger": 1}}, schema=KEYED_SCHEMA,
                         table={"catalog": found.spec_catalog, "name": f"{namespace}.orders", "key": KEY,
                                "properties": {"format-version": "3"}},
                         changes={"format": "upsert", "deletes": "position"},
                         deadLetter={"table": f"{namespace}.orders_dlq"})
        direct = rest_catalog_s3.load()

        def reached() -> bool:
            commits = sink_commits(direct.load_table(f"{namespace}.orders"), "test/orders")
            return bool(commits) and commits[-1].frontier == {"after": "0003.json"}

        with BackgroundJob(SyncJob(sync, 1, spark)) as running:
            running.wait_until(reached, "the last change file committed", timeout=300)
    refused = [path for _, _, path, kind in found.store.log if kind]
    assert sum(f"/inbox-{namespace}/" in path for path in refused) >= 4, refused  # each change file's read at least
    assert sum("/data/" in path for path in refused) >= 1, refused
    table = direct.load_table(f"{namespace}.orders")
    assert pyiceberg_rows(table) == stream.model, f"seed {SEED}"
    assert unreferenced_sink_files(table, "test/orders") == []
