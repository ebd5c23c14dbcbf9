"""Keyed sync (change data capture) vs Spark's MERGE INTO, merge-on-read, on the same cores.

``python -m bench.cdc [--keys 20000] [--changes 100000] [--batch 10000] [--workdir DIR]``

The same Debezium change stream — a snapshot of every key (op r), then inserts, re-inserts,
updates that move the row to another ``day(updated_at)`` partition and deletes — is applied batch
by batch (one batch = one trigger of the sync) to two tables with the same schema and partitioning,
in one local[2] Spark session:

* IcebergSync, twice: the job (spark_app.job.SyncJob, in process) on the files source, one change file
  per trigger (``maxFilesPerTrigger: 1``): decode, collapse per key, data files, and the older row of
  each touched key deleted in the same atomic snapshot: by position (``changes.deletes: position``,
  the default: rows located on the head at commit time, position delete files), and by equality
  delete files (``changes.deletes: equality``).
* MERGE INTO: Apache Iceberg's Spark runtime with its SQL extensions, table properties
  ``write.merge.mode``/``write.update.mode``/``write.delete.mode`` = ``merge-on-read``; per batch
  the change file is read with ``spark.read.json``, reduced to the last change per key (by the
  Debezium event's ``source.lsn``), and merged (matched d: DELETE, matched: UPDATE, not matched and
  not d: INSERT).

Figures: changes per second over the whole stream (wall time from the first batch to the last
commit; IcebergSync includes its fence), then the read time of each table afterwards (a full scan
with Spark: every column of every live row, median of 3), and the files each table holds. Both
tables are checked equal to the stream's model (key -> row) first. Writes docs/benchmarks/cdc.md.
``--deletes`` runs the sync in one layout only.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from bench.common import CORES, REPO, iceberg_runtime_jar, load_average, machine

START = datetime(2025, 3, 1, tzinfo=UTC)
ZONES = [UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-7))]
SCHEMA = [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"},
          {"name": "updated_at", "type": "timestamptz"}]
EVENT_DDL = ("before struct<id:bigint,name:string,updated_at:string>, "
             "after struct<id:bigint,name:string,updated_at:string>, op string, source struct<lsn:bigint>")
MERGE_PROPERTIES = {"format-version": "2", "write.merge.mode": "merge-on-read",
                    "write.update.mode": "merge-on-read", "write.delete.mode": "merge-on-read"}
OUTPUT = REPO / "docs" / "benchmarks" / "cdc.md"

Row = tuple[str, int]


def micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def change_files(directory: Path, keys: int, changes: int, batch: int, seed: int = 13) -> tuple[list[Path], dict[int, Row]]:
    """Write the stream as JSON-lines files (a snapshot, then ``changes`` in batches); returns them and the model."""
    rng = random.Random(seed)
    model: dict[int, Row] = {}
    lsn = 0

    def row(key: int) -> tuple[dict[str, Any], Row]:
        moment = START + timedelta(days=rng.randrange(14), seconds=rng.randrange(86_400),
                                   microseconds=rng.randrange(1_000_000))
        name = f"customer {key} v{rng.randrange(10**6)}"
        return ({"id": key, "name": name, "updated_at": moment.astimezone(rng.choice(ZONES)).isoformat()},
                (name, micros(moment)))

    def event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
        nonlocal lsn
        lsn += 1
        return json.dumps({"before": before, "after": after, "op": op, "ts_ms": lsn, "source": {"lsn": lsn}})

    files = []
    lines = []
    for key in range(keys):
        after, model[key] = row(key)
        lines.append(event("r", None, after))
    files.append(directory / "00000-snapshot.json")
    files[-1].write_text("\n".join(lines) + "\n")
    live = list(model)
    for number in range(1, -(-changes // batch) + 1):
        lines = []
        for _ in range(min(batch, changes - (number - 1) * batch)):
            roll = rng.random()
            if roll < 0.6 and live:  # an update, nearly always to another day
                key = rng.choice(live)
                after, model[key] = row(key)
                lines.append(event("u", {"id": key, "name": None, "updated_at": None}, after))
            elif roll < 0.8 and live:
                slot = rng.randrange(len(live))
                key = live[slot]
                live[slot] = live[-1]
                live.pop()
                del model[key]
                lines.append(event("d", {"id": key, "name": None, "updated_at": None}, None))
            else:  # an insert: a deleted key comes back, or an upsert of a live one
                key = rng.randrange(keys)
                if key not in model:
                    live.append(key)
                after, model[key] = row(key)
                lines.append(event("c", None, after))
        files.append(directory / f"{number:05d}.json")
        files[-1].write_text("\n".join(lines) + "\n")
    return files, model


def table_rows(spark: Any, frame: Any) -> dict[int, Row]:
    rows = frame.selectExpr("id", "name", "unix_micros(updated_at) AS micros").collect()
    assert len(rows) == len({r["id"] for r in rows}), "a key is in the table twice"
    return {r["id"]: (r["name"], r["micros"]) for r in rows}


def scan_seconds(frame_of: Any, repeat: int = 3) -> float:
    """Median wall time of a full scan (every column of every live row, deletes applied)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        frame_of().selectExpr("count(*)", "sum(hash(id, name, updated_at))").collect()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def table_files(summary: dict[str, str]) -> dict[str, int]:
    return {name: int(summary.get(key, 0)) for name, key in (
        ("data files", "total-data-files"), ("delete files", "total-delete-files"),
        ("equality deletes", "total-equality-deletes"), ("position deletes", "total-position-deletes"),
        ("rows in data files", "total-records"))}


def run_sync(spark: Any, workdir: Path, inbox: Path, last: str, deletes: str) -> tuple[float, str, dict[str, int]]:
    from icebergsync import protocol
    from icebergsync.catalog import open_catalog
    from icebergsync.spec import parse_spec
    from spark_app.job import SyncJob

    document = {
        "apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "metadata": {"name": "cdc", "namespace": "bench"},
        "spec": {
            "source": {"files": {"path": str(inbox), "maxFilesPerTrigger": 1}},
            "schema": SCHEMA,
            "table": {"catalog": {"type": "sql", "uri": f"sqlite:///{workdir}/catalog-{deletes}.db",
                                  "warehouse": str(workdir / f"sync-warehouse-{deletes}")},
                      "name": "shop.customers", "key": ["id"], "partitionBy": ["day(updated_at)"]},
            "changes": {"format": "debezium", "deletes": deletes},
            "commit": {"interval": "500ms", "pollInterval": "100ms", "targetFileSize": "64Mi"},
        },
    }
    sync = parse_spec(document)
    catalog = open_catalog(sync.spec.table.catalog_or_default)
    job = SyncJob(sync, 1, spark)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            job.run()
        except BaseException as exc:  # reported below
            errors.append(exc)

    def done() -> bool:
        try:
            table = catalog.load_table("shop.customers")
        except Exception:
            return False
        commits = [protocol.parse_commit(s) for s in protocol.main_ancestry(table.metadata)]
        return any(c is not None and c.frontier == {"after": last} for c in commits)

    started = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while not done():
        if errors:
            raise errors[0]
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    job.stop_requested.set()
    thread.join(120)
    if errors:
        raise errors[0]
    table = catalog.load_table("shop.customers")
    snapshot = table.current_snapshot()
    summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
    return elapsed, table.metadata_location, table_files(summary)


def run_merge(spark: Any, files: list[Path]) -> tuple[float, list[float], dict[str, int]]:
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
    summary_row = spark.sql("SELECT summary FROM bench.shop.customers.snapshots ORDER BY committed_at DESC LIMIT 1"
                            ).collect()[0]["summary"]
    return elapsed, per_batch, table_files(dict(summary_row))


def render(results: dict[str, Any]) -> str:
    runs = [(f"IcebergSync, {deletes} deletes", results["sync"][deletes]) for deletes in results["sync"]]
    runs.append(("Spark MERGE INTO (merge-on-read)", results["merge"]))
    lines = [
        "# Keyed sync vs Spark MERGE INTO (merge-on-read)",
        "",
        "Generated by `python -m bench.cdc` (bench/cdc.py; the method is in its docstring). The same",
        f"Debezium change stream: a snapshot of {results['keys']:,} keys, then {results['changes']:,} changes "
        f"in batches of {results['batch']:,}",
        "(60% updates that move the row to another day partition, 20% deletes, 20% inserts/re-inserts),",
        f"applied batch by batch to tables partitioned by `day(updated_at)`, in one local[{CORES}] Spark session.",
        "Every table was checked equal to the stream's model before the reads were timed.",
        "",
        f"Run: {results['date']}; load average before {results['load_before']}, after {results['load_after']} "
        f"on {results['machine']['nproc']} cores (a shared machine: figures are noisy).",
        "",
        "| | " + " | ".join(name for name, _ in runs) + " |",
        "| --- |" + " --- |" * len(runs),
        "| wall time, all batches | " + " | ".join(f"{run['seconds']:.1f} s" for _, run in runs) + " |",
        "| changes per second (incl. snapshot rows) | " + " | ".join(f"{run['per_second']:,.0f}" for _, run in runs)
        + " |",
        "| full scan afterwards (median of 3) | " + " | ".join(f"{run['scan_seconds']:.2f} s" for _, run in runs)
        + " |",
    ]
    for name in ("data files", "delete files", "equality deletes", "position deletes", "rows in data files"):
        lines.append(f"| {name} | " + " | ".join(f"{run['files'].get(name, 0):,}" for _, run in runs) + " |")
    lines += [
        "| live rows | " + " | ".join(f"{results['live_rows']:,}" for _ in runs) + " |",
        "",
        "MERGE INTO per batch (s): " + ", ".join(f"{s:.1f}" for s in results["merge"]["per_batch"]),
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in results["machine"].items()),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--deletes", choices=["position", "equality"], nargs="*", default=["position", "equality"],
                        help="the sync's delete layouts to run (default: both)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-cdc-"))
    shutil.rmtree(workdir, ignore_errors=True)
    inbox = workdir / "inbox"
    inbox.mkdir(parents=True)
    files, model = change_files(inbox, args.keys, args.changes, args.batch)
    total = args.keys + args.changes

    from spark_app.session import build_session

    spark = build_session("bench-cdc", f"local[{CORES}]", {
        "spark.driver.maxResultSize": "0", "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraClassPath": iceberg_runtime_jar(),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.catalog.bench": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.bench.type": "hadoop",
        "spark.sql.catalog.bench.warehouse": (workdir / "merge-warehouse").as_uri(),
    })
    load_before = " ".join(f"{x:.1f}" for x in load_average())
    syncs: dict[str, dict[str, Any]] = {}
    for deletes in args.deletes:
        seconds, location, sync_files = run_sync(spark, workdir, inbox, files[-1].name, deletes)
        print(f"[cdc] IcebergSync ({deletes} deletes): {total:,} changes in {seconds:.1f} s", flush=True)

        def sync_frame(location: str = location) -> Any:
            return spark.read.format("iceberg").load(location)

        assert table_rows(spark, sync_frame()) == model, f"IcebergSync's table ({deletes}) differs from the model"
        syncs[deletes] = {"seconds": seconds, "per_second": total / seconds, "scan_seconds": scan_seconds(sync_frame),
                          "files": sync_files}
    merge_seconds, per_batch, merge_files = run_merge(spark, files)
    print(f"[cdc] MERGE INTO: {total:,} changes in {merge_seconds:.1f} s", flush=True)

    def merge_frame() -> Any:
        return spark.table("bench.shop.customers")

    assert table_rows(spark, merge_frame()) == model, "MERGE INTO's table differs from the model"
    merge_scan = scan_seconds(merge_frame)
    results = {
        "keys": args.keys, "changes": args.changes, "batch": args.batch, "live_rows": len(model),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": load_before, "load_after": " ".join(f"{x:.1f}" for x in load_average()),
        "machine": machine(),
        "sync": syncs,
        "merge": {"seconds": merge_seconds, "per_second": total / merge_seconds, "scan_seconds": merge_scan,
                  "files": merge_files, "per_batch": per_batch},
    }
    spark.stop()
    text = render(results)
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
