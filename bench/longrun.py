"""A long stream committed every second, with the defaults: does the table stay fast to read?

``python -m bench.longrun [--minutes 12] [--sample-minutes 3] [--mode keyed append] [--workdir DIR]``

One sync per mode runs in process (spark_app.job.loop.SyncJob, local[2]) with ``commit.interval: 1s`` and
every default, upkeep included (compaction, delete rewrites, snapshot expiry, orphan removal):

* **keyed**: bench.cdc's Debezium stream (a snapshot of ``--keys`` keys, then updates that move rows
  between ``day(updated_at)`` partitions, deletes and re-inserts) fed as one change file of
  ``--changes-per-second`` changes per second into the files source's directory
  (``maxFilesPerTrigger: 1``): one trigger a second, position deletes.
* **append**: the built-in generator at ``--rows-per-second``, partitioned by ``day(ts)``.

Every ``--sample-minutes`` the table, at the snapshot current then, is read in full with Apache
Iceberg's Spark reader (every column of every live row), and so is a *fresh copy* of the same live
rows written once by Spark (CTAS, same partitioning), the two read in turn (median of ``SCAN_ROUNDS`` rounds);
the page shows the ratio next to the target (at most 1.5x) and the table's data files, delete files, snapshots and
metadata file size, which should stay flat while the stream runs, and what upkeep rewrote over the run
(the job's run summary). Writes docs/benchmarks/longrun.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.support.change_stream import SCHEMA as KEYED_SCHEMA
from bench.support.change_stream import change_files
from bench.support.common import (
    REPO,
    SyncInThread,
    iceberg_session,
    load_average,
    machine,
    publish,
    sync_document,
)
from bench.support.scans import scans_in_turn

OUTPUT = REPO / "docs" / "benchmarks" / "longrun.md"
TARGET_RATIO = 1.5
SCAN_ROUNDS = 9  #: sub-second scans next to a running sync: more rounds settle the median


def keyed_spec(workdir: Path) -> dict[str, Any]:
    return {
        "source": {"files": {"path": str(workdir / "inbox"), "maxFilesPerTrigger": 1}},
        "schema": KEYED_SCHEMA,
        "table": {"catalog": catalog(workdir), "name": "shop.customers", "key": ["id"], "partitionBy": ["day(updated_at)"]},
        "changes": {"format": "debezium"},
        "commit": {"interval": "1s", "pollInterval": "100ms"},
    }


def append_spec(workdir: Path, rows_per_second: int) -> dict[str, Any]:
    return {
        "source": {"generator": {"rowsPerSecond": rows_per_second}},
        "eventTimeColumn": "ts",
        "table": {"catalog": catalog(workdir), "name": "demo.trips", "partitionBy": ["day(ts)"]},
        "commit": {"interval": "1s"},
    }


def catalog(workdir: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{workdir}/catalog.db", "warehouse": str(workdir / "warehouse")}


class Feeder(threading.Thread):
    """Moves one pre-written change file a second into the source directory, in name order."""

    def __init__(self, staged: list[Path], inbox: Path):
        super().__init__(daemon=True)
        self.staged, self.inbox, self.fed = staged, inbox, 0
        self.stop = threading.Event()

    def run(self) -> None:
        for path in self.staged:
            if self.stop.is_set():
                return
            os.rename(path, self.inbox / path.name)
            self.fed += 1
            self.stop.wait(1.0)


def sample(spark: Any, catalog_handle: Any, name: str, partition_column: str, elapsed_minutes: float) -> dict[str, Any]:
    """The table as it is now: its full-scan time against a fresh copy's, and its file and snapshot counts."""
    table = catalog_handle.load_table(name)
    snapshot = table.current_snapshot()
    summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
    location = table.metadata_location
    spark.read.format("iceberg").load(location).createOrReplaceTempView("live")
    spark.sql("DROP TABLE IF EXISTS bench.fresh.copy")
    spark.sql(f"CREATE TABLE bench.fresh.copy USING iceberg PARTITIONED BY (days({partition_column})) "
              "TBLPROPERTIES ('format-version'='2') AS SELECT * FROM live")
    scans = scans_in_turn({"table": lambda: spark.read.format("iceberg").load(location),
                           "fresh": lambda: spark.table("bench.fresh.copy")}, rounds=SCAN_ROUNDS)
    return {
        "minute": elapsed_minutes, "scan": scans["table"], "fresh": scans["fresh"], "snapshots": len(table.snapshots()),
        "data_files": int(summary.get("total-data-files", 0)), "delete_files": int(summary.get("total-delete-files", 0)),
        "rows": int(summary.get("total-records", 0)),
        "metadata_kib": os.path.getsize(location.removeprefix("file://")) / 1024,
        "fresh_files": spark.sql("SELECT count(*) AS n FROM bench.fresh.copy.files").collect()[0]["n"],
    }


def run_mode(spark: Any, mode: str, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run one mode's sync for ``args.minutes``, sampling every ``args.sample_minutes``."""
    from icebergsync.catalog import open_catalog

    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "inbox").mkdir(parents=True)
    feeder: Feeder | None = None
    if mode == "keyed":
        staging = workdir / "staging"
        staging.mkdir()
        seconds = int(args.minutes * 60) + 60
        files, _ = change_files(staging, args.keys, args.changes_per_second * seconds, args.changes_per_second)
        feeder = Feeder(files, workdir / "inbox")
        spec, name, partition_column = keyed_spec(workdir), "shop.customers", "updated_at"
    else:
        spec, name, partition_column = append_spec(workdir, args.rows_per_second), "demo.trips", "ts"
    sync = SyncInThread(sync_document(f"longrun-{mode}", spec), spark)
    started = time.monotonic()
    sync.start()
    if feeder:
        feeder.start()
    catalog_handle = open_catalog(sync.sync.spec.table.catalog_or_default)
    samples = []
    load_before = load_average()
    for number in range(1, int(args.minutes / args.sample_minutes) + 1):
        while time.monotonic() - started < number * args.sample_minutes * 60:
            sync.check()
            time.sleep(1)
        samples.append(sample(spark, catalog_handle, name, partition_column, (time.monotonic() - started) / 60))
        print(f"[longrun] {mode}: {samples[-1]}", flush=True)
    if feeder:
        feeder.stop.set()
    sync.stop()
    assert sync.summary is not None
    upkeep = sync.summary.upkeep
    return {"mode": mode, "samples": samples, "load_before": load_before, "load_after": load_average(),
            "commits": sync.summary.commits, "upkeep": {"runs": upkeep.runs, "files": upkeep.data_files_rewritten,
                                                        "MB": upkeep.bytes_rewritten / 1e6, "seconds": upkeep.seconds}}


def render(results: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        "# A long stream committed every second: read cost against a fresh copy",
        "",
        "Generated by `python -m bench.longrun` (bench/longrun.py; the method is in its docstring), with",
        f"`commit.interval: 1s` and every default (upkeep on). Keyed: {args.changes_per_second:,} Debezium changes a",
        f"second over {args.keys:,} keys (position deletes). Append: the generator at {args.rows_per_second:,} rows a",
        f"second. The target: a full scan at most {TARGET_RATIO}x a fresh copy's, at any point, with the",
        "table's file and snapshot counts flat.",
        "",
        f"Run: {results['date']} on {results['machine']['nproc']} cores of a shared machine (noisy: each ratio "
        f"compares two tables read in turn, median of {SCAN_ROUNDS} rounds, while the sync runs).",
        "",
    ]
    for run in results["runs"]:
        lines += [
            f"## {run['mode']}",
            "",
            "| minute | full scan | fresh copy | ratio (target <= 1.5x) | data files (fresh copy) | delete files "
            "| snapshots | metadata file | rows in data files |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for s in run["samples"]:
            lines.append(f"| {s['minute']:.1f} | {s['scan']:.2f} s | {s['fresh']:.2f} s | {s['scan'] / s['fresh']:.2f}x "
                         f"| {s['data_files']:,} ({s['fresh_files']:,}) | {s['delete_files']:,} | {s['snapshots']:,} "
                         f"| {s['metadata_kib']:,.0f} KiB | {s['rows']:,} |")
        upkeep = run["upkeep"]
        lines += ["", f"Upkeep over the run's {run['commits']:,} data commits: {upkeep['runs']:,} compaction and delete "
                  f"rewrite runs rewrote {upkeep['files']:,} data files ({upkeep['MB']:,.1f} MB) in {upkeep['seconds']:.1f} s.",
                  "", "Load average before {:.1f} {:.1f} {:.1f}, after {:.1f} {:.1f} {:.1f}.".format(
                      *run["load_before"], *run["load_after"]), ""]
    lines += ["Machine: " + ", ".join(f"{k} {v}" for k, v in results["machine"].items()), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=12)
    parser.add_argument("--sample-minutes", type=float, default=3)
    parser.add_argument("--mode", choices=["keyed", "append"], nargs="+", default=["keyed", "append"])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--changes-per-second", type=int, default=1_000)
    parser.add_argument("--rows-per-second", type=int, default=5_000)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-longrun-"))
    spark = iceberg_session("bench-longrun", workdir / "fresh-warehouse")
    runs = [run_mode(spark, mode, workdir / mode, args) for mode in args.mode]
    results = {"runs": runs, "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine()}
    spark.stop()
    publish(render(results, args), args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
