"""Keyed sync (change data capture) vs Spark's MERGE INTO, merge-on-read, on the same cores.

``python -m bench.cdc [--keys 100000] [--changes 1000000] [--batch 100000 10000] [--workdir DIR]``

The same Debezium change stream — a snapshot of every key (op r), then inserts, re-inserts,
updates that move the row to another ``day(updated_at)`` partition and deletes — is applied batch
by batch (one batch = one trigger of the sync) to two tables with the same schema and partitioning,
in one local[2] Spark session:

* IcebergSync, twice: the job (spark_app.job.loop.SyncJob, in process) on the files source, one change file
  per trigger (``maxFilesPerTrigger: 1``): decode, collapse per key, data files, and the older row of
  each touched key deleted in the same atomic snapshot: by position (``changes.deletes: position``,
  the default: rows located on the head at commit time, position delete files), and by equality
  delete files (``changes.deletes: equality``).
* MERGE INTO: Apache Iceberg's Spark runtime with its SQL extensions, table properties
  ``write.merge.mode``/``write.update.mode``/``write.delete.mode`` = ``merge-on-read``; per batch
  the change file is read with ``spark.read.json``, reduced to the last change per key (by the
  Debezium event's ``source.lsn``), and merged (matched d: DELETE, matched: UPDATE, not matched and
  not d: INSERT).

Before any of it, a small stream (2,000 keys, 6,000 changes) goes once through every contender, untimed:
the first run of a session pays the JVM's warm-up (the position-delete sync, which ran first, took 20 s
of which about 8 s were that, at 100,000-change batches, against 11 s when run again).

Figures: changes per second over the whole stream (wall time from the first batch to the last
commit; IcebergSync includes its fence and its upkeep, on by default), then the read time of each
table afterwards (a full scan with Spark: every column of every live row) against a
*fresh copy* of the live rows (written once by Spark, same partitioning), all of them read in turn
after the last table was written (median of 5 rounds: a table read early in the session, before
the JVM warmed up, would look slower than one read at the end), the files each table
holds and the files its commits added per batch. Every table is checked equal to the stream's model
(key -> row) first. Each ``--batch`` size is one run of the whole stream; the page lists the
targets next to the measured ratios, and what the sync's upkeep rewrote (its run summary). Writes
docs/benchmarks/cdc.md. ``--deletes`` runs the sync in the layouts named only; ``--maintenance`` gives
the sync a ``spec.maintenance`` (JSON, e.g. ``'{"compaction": {"maxExtraFilesPercent": 0}}'``).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.support.change_stream import SCHEMA, change_files, table_rows
from bench.support.common import (
    CORES,
    REPO,
    SyncInThread,
    committed_through,
    iceberg_session,
    load_average,
    machine,
    publish,
    sync_document,
)
from bench.support.scans import scans_in_turn

EVENT_DDL = ("before struct<id:bigint,name:string,updated_at:string>, "
             "after struct<id:bigint,name:string,updated_at:string>, op string, source struct<lsn:bigint>")
MERGE_PROPERTIES = {"format-version": "2", "write.merge.mode": "merge-on-read",
                    "write.update.mode": "merge-on-read", "write.delete.mode": "merge-on-read"}
OUTPUT = REPO / "docs" / "benchmarks" / "cdc.md"


def table_files(summary: dict[str, str]) -> dict[str, int]:
    return {name: int(summary.get(key, 0)) for name, key in (
        ("data files", "total-data-files"), ("delete files", "total-delete-files"),
        ("equality deletes", "total-equality-deletes"), ("position deletes", "total-position-deletes"),
        ("rows in data files", "total-records"))}


def files_added(summaries: list[dict[str, str]]) -> int:
    """Data and delete files the snapshots with ``summaries`` added, all of them."""
    return sum(int(s.get("added-data-files", 0)) + int(s.get("added-delete-files", 0)) for s in summaries)


def run_sync(spark: Any, workdir: Path, inbox: Path, last: str, deletes: str,
             maintenance: dict[str, Any]) -> tuple[float, str, dict[str, int], int, dict[str, float]]:
    from icebergsync.catalog import open_catalog

    document = sync_document("cdc", {
        **({"maintenance": maintenance} if maintenance else {}),
        "source": {"files": {"path": str(inbox), "maxFilesPerTrigger": 1}},
        "schema": SCHEMA,
        "table": {"catalog": {"type": "sql", "uri": f"sqlite:///{workdir}/catalog-{deletes}.db",
                              "warehouse": str(workdir / f"sync-warehouse-{deletes}")},
                  "name": "shop.customers", "key": ["id"], "partitionBy": ["day(updated_at)"]},
        "changes": {"format": "debezium", "deletes": deletes},
        "commit": {"interval": "500ms", "pollInterval": "100ms", "targetFileSize": "64Mi"},
    })
    sync = SyncInThread(document, spark)
    catalog = open_catalog(sync.sync.spec.table.catalog_or_default)

    started = time.perf_counter()
    sync.start()
    while not committed_through(catalog, "shop.customers", last):
        sync.check()
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    sync.stop(120)
    table = catalog.load_table("shop.customers")
    snapshot = table.current_snapshot()
    summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
    added = files_added([s.summary.additional_properties for s in table.snapshots() if s.summary])
    assert sync.summary is not None
    upkeep = sync.summary.upkeep
    rewrites = {"runs": upkeep.runs, "data files": upkeep.data_files_rewritten, "MB": upkeep.bytes_rewritten / 1e6,
                "seconds": upkeep.seconds}
    return elapsed, table.metadata_location, table_files(summary), added, rewrites


def run_merge(spark: Any, files: list[Path]) -> tuple[float, list[float], dict[str, int], int]:
    properties = ", ".join(f"'{k}'='{v}'" for k, v in MERGE_PROPERTIES.items())
    spark.sql("CREATE NAMESPACE IF NOT EXISTS bench.shop")
    spark.sql("DROP TABLE IF EXISTS bench.shop.customers")
    spark.sql("CREATE TABLE bench.shop.customers (id bigint NOT NULL, name string, updated_at timestamp) "
              f"USING iceberg PARTITIONED BY (days(updated_at)) TBLPROPERTIES ({properties})")
    per_batch = []
    started = time.perf_counter()
    for path in files:
        batch_started = time.perf_counter()
        events = spark.read.schema(EVENT_DDL).json(path.as_uri())
        events.selectExpr(
            "coalesce(after.id, before.id) AS id", "after.name AS name",
            "CAST(after.updated_at AS TIMESTAMP) AS updated_at", "op", "source.lsn AS lsn",
        ).createOrReplaceTempView("events")
        spark.sql("SELECT id, name, updated_at, op FROM (SELECT *, row_number() OVER "
                  "(PARTITION BY id ORDER BY lsn DESC) AS newest FROM events) WHERE newest = 1"
                  ).createOrReplaceTempView("changes")
        spark.sql("""
            MERGE INTO bench.shop.customers t USING changes s ON t.id = s.id
            WHEN MATCHED AND s.op = 'd' THEN DELETE
            WHEN MATCHED THEN UPDATE SET t.name = s.name, t.updated_at = s.updated_at
            WHEN NOT MATCHED AND s.op != 'd' THEN INSERT (id, name, updated_at) VALUES (s.id, s.name, s.updated_at)
        """)
        per_batch.append(time.perf_counter() - batch_started)
    elapsed = time.perf_counter() - started
    summaries = [dict(row["summary"]) for row in spark.sql(
        "SELECT summary FROM bench.shop.customers.snapshots ORDER BY committed_at").collect()]
    return elapsed, per_batch, table_files(summaries[-1]), files_added(summaries)


def fresh_copy(spark: Any) -> Any:
    """The live rows written once by Spark (same schema and partitioning): a function reading them."""
    spark.sql("DROP TABLE IF EXISTS bench.shop.fresh")
    spark.sql("CREATE TABLE bench.shop.fresh USING iceberg PARTITIONED BY (days(updated_at)) "
              "TBLPROPERTIES ('format-version'='2') AS SELECT * FROM bench.shop.customers")
    return lambda: spark.table("bench.shop.fresh")


TARGETS = "ingest >= 2x MERGE INTO; scan <= 1.1x MERGE INTO's table and <= 1.5x a fresh copy; files per batch <= MERGE INTO's"


def render_run(run: dict[str, Any]) -> list[str]:
    """One batch size's table: every sync layout and MERGE INTO side by side, with the target ratios."""
    syncs = [(f"IcebergSync, {deletes} deletes", result) for deletes, result in run["sync"].items()]
    merge = run["merge"]
    columns = [*syncs, ("Spark MERGE INTO (merge-on-read)", merge)]
    batches = run["batches"]

    def row(label: str, cell: Any) -> str:
        return f"| {label} | " + " | ".join(cell(result) for _, result in columns) + " |"

    lines = [
        f"### Batches of {run['batch']:,} changes ({batches} batches)",
        "",
        "| | " + " | ".join(name for name, _ in columns) + " |",
        "| --- |" + " --- |" * len(columns),
        row("wall time, all batches", lambda r: f"{r['seconds']:.1f} s"),
        row("changes per second (incl. snapshot rows)", lambda r: f"{r['per_second']:,.0f}"),
        row("ingest vs MERGE INTO (target >= 2x)", lambda r: f"{r['per_second'] / merge['per_second']:.2f}x"),
        row("full scan afterwards (median of 5, tables read in turn)", lambda r: f"{r['scan_seconds']:.2f} s"),
        row("scan vs MERGE INTO's table (target <= 1.1x)", lambda r: f"{r['scan_seconds'] / merge['scan_seconds']:.2f}x"),
        row(f"scan vs a fresh copy ({run['fresh_scan_seconds']:.2f} s; target <= 1.5x)",
            lambda r: f"{r['scan_seconds'] / run['fresh_scan_seconds']:.2f}x"),
        row("files added per batch (target <= MERGE INTO's)", lambda r: f"{r['files_added'] / batches:.1f}"),
    ]
    for name in ("data files", "delete files", "equality deletes", "position deletes", "rows in data files"):
        lines.append(row(name, lambda r, name=name: f"{r['files'].get(name, 0):,}"))

    def upkeep(r: dict[str, Any]) -> str:
        done = r.get("upkeep")
        return "-" if done is None else (f"{done['runs']} runs, {done['data files']:,} files, {done['MB']:.1f} MB "
                                         f"read, {done['seconds']:.1f} s")

    lines.append(row("upkeep rewrites (runs, data files and bytes rewritten, time)", upkeep))
    lines += [
        row("live rows", lambda r: f"{run['live_rows']:,}"),
        "",
        f"Load average before {run['load_before']}, after {run['load_after']}. "
        "MERGE INTO per batch (s): " + ", ".join(f"{s:.1f}" for s in merge["per_batch"]),
        "",
    ]
    return lines


def render(results: dict[str, Any]) -> str:
    lines = [
        "# Keyed sync vs Spark MERGE INTO (merge-on-read)",
        "",
        "Generated by `python -m bench.cdc` (bench/cdc.py; the method is in its docstring). The same",
        f"Debezium change stream: a snapshot of {results['keys']:,} keys, then {results['changes']:,} changes",
        "(60% updates that move the row to another day partition, 20% deletes, 20% inserts/re-inserts),",
        f"applied batch by batch to tables partitioned by `day(updated_at)`, in one local[{CORES}] Spark session,",
        "once per batch size. Every table was checked equal to the stream's model before the reads were timed.",
        f"The targets: {TARGETS}.",
        *([f"The sync's `spec.maintenance`: `{json.dumps(results['maintenance'])}`."] if results["maintenance"] else []),
        "",
        f"Run: {results['date']} on {results['machine']['nproc']} cores of a shared machine (figures are noisy; "
        "the ratios compare runs of one session).",
        "",
    ]
    for run in results["runs"]:
        lines += render_run(run)
    lines += ["Machine: " + ", ".join(f"{k} {v}" for k, v in results["machine"].items()), ""]
    return "\n".join(lines)


def run_stream(spark: Any, workdir: Path, keys: int, changes: int, batch: int, layouts: list[str],
               maintenance: dict[str, Any]) -> dict[str, Any]:
    """The whole stream in batches of ``batch``, through every sync layout and MERGE INTO, checked and read."""
    shutil.rmtree(workdir, ignore_errors=True)
    inbox = workdir / "inbox"
    inbox.mkdir(parents=True)
    files, model = change_files(inbox, keys, changes, batch)
    total = keys + changes
    load_before = " ".join(f"{x:.1f}" for x in load_average())
    syncs: dict[str, dict[str, Any]] = {}
    frames: dict[str, Any] = {}
    for deletes in layouts:
        seconds, location, sync_files, added, upkeep = run_sync(spark, workdir, inbox, files[-1].name, deletes,
                                                                maintenance)
        print(f"[cdc] batch {batch:,}: IcebergSync ({deletes} deletes): {total:,} changes in {seconds:.1f} s; "
              f"upkeep {upkeep}", flush=True)

        def sync_frame(location: str = location) -> Any:
            return spark.read.format("iceberg").load(location)

        assert table_rows(spark, sync_frame()) == model, f"IcebergSync's table ({deletes}) differs from the model"
        frames[deletes] = sync_frame
        syncs[deletes] = {"seconds": seconds, "per_second": total / seconds, "files": sync_files, "files_added": added,
                          "upkeep": upkeep}
    merge_seconds, per_batch, merge_files, merge_added = run_merge(spark, files)
    print(f"[cdc] batch {batch:,}: MERGE INTO: {total:,} changes in {merge_seconds:.1f} s", flush=True)

    def merge_frame() -> Any:
        return spark.table("bench.shop.customers")

    assert table_rows(spark, merge_frame()) == model, "MERGE INTO's table differs from the model"
    scans = scans_in_turn({**frames, "merge": merge_frame, "fresh": fresh_copy(spark)})
    for deletes, result in syncs.items():
        result["scan_seconds"] = scans[deletes]
    return {
        "batch": batch, "batches": len(files), "live_rows": len(model), "sync": syncs,
        "merge": {"seconds": merge_seconds, "per_second": total / merge_seconds, "scan_seconds": scans["merge"],
                  "files": merge_files, "per_batch": per_batch, "files_added": merge_added},
        "fresh_scan_seconds": scans["fresh"],
        "load_before": load_before, "load_after": " ".join(f"{x:.1f}" for x in load_average()),
    }


def warm_up(spark: Any, workdir: Path, layouts: list[str], maintenance: dict[str, Any]) -> None:
    """A small stream through every contender, untimed, so that none of them pays the JVM's warm-up."""
    shutil.rmtree(workdir, ignore_errors=True)
    inbox = workdir / "inbox"
    inbox.mkdir(parents=True)
    files, _ = change_files(inbox, 2_000, 6_000, 2_000)
    for deletes in layouts:
        run_sync(spark, workdir, inbox, files[-1].name, deletes, maintenance)
    run_merge(spark, files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, nargs="+", default=[100_000, 10_000])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--deletes", choices=["position", "equality"], nargs="*", default=["position", "equality"],
                        help="the sync's delete layouts to run (default: both)")
    parser.add_argument("--maintenance", type=json.loads, default={},
                        help="the sync's spec.maintenance as JSON (default: none, every default)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-cdc-"))

    spark = iceberg_session("bench-cdc", workdir / "merge-warehouse")
    warm_up(spark, workdir / "warm-up", args.deletes, args.maintenance)
    runs = [run_stream(spark, workdir / f"batch-{batch}", args.keys, args.changes, batch, args.deletes,
                       args.maintenance) for batch in args.batch]
    results = {"keys": args.keys, "changes": args.changes, "runs": runs, "maintenance": args.maintenance,
               "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine()}
    spark.stop()
    publish(render(results), args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
