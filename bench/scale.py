"""Does a keyed trigger's cost follow its changes, not the table's size?

``python -m bench.scale [--rows 1000000 20000000] [--changes 100000] [--triggers 4] [--workload recent uniform]``

For each table size a keyed table (``id`` key, partitioned by ``day(updated_at)``, format 2) is
loaded with ``--rows`` rows by the sink's own writer, as a long-running sync would have left it
(ids in creation order, ``updated_at`` rising with the id, so each day's files hold a range of ids;
Bloom filters on ``id``), in one snapshot. Then the sync (spark_app.job.loop.SyncJob in process,
local[2], files source, one change file per trigger, every default) applies ``--triggers`` triggers
of ``--changes`` Debezium changes each, one at a time, and each trigger's time is measured from the
file's arrival to its commit landing; the first trigger of a run also starts Spark's workers and
reads every data file's key summary, and the key columns it searches, into the driver's caches (a
restart's cost), so the comparison uses the median of the later ones. Upkeep runs between triggers
as in any sync: what it takes beyond the writing of the next change file delays the next trigger
and is in its time. Workloads:

* **recent**: half inserts of new ids, half updates of ids among the newest 1% (rows that move to
  today's partition): what a database's change stream mostly looks like.
* **uniform**: updates of ids drawn uniformly from the whole table.

The page shows each trigger's time on every size and the ratio of the largest size to the smallest
(the target: at most 1.5x). Writes docs/benchmarks/scale.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bench.support.change_stream import SCHEMA, START
from bench.support.common import (
    REPO,
    SyncInThread,
    committed_through,
    iceberg_session,
    load_average,
    machine,
    publish,
    sync_document,
)

OUTPUT = REPO / "docs" / "benchmarks" / "scale.md"
LOAD_BATCH_ROWS = 1_000_000
SECONDS_PER_ID = 0.5  # the loaded rows' updated_at: START + id * this, so ids follow time


def spec(workdir: Path) -> dict[str, Any]:
    return {
        "source": {"files": {"path": str(workdir / "inbox"), "maxFilesPerTrigger": 1}},
        "schema": SCHEMA,
        "table": {"catalog": {"type": "sql", "uri": f"sqlite:///{workdir}/catalog.db",
                              "warehouse": str(workdir / "warehouse")},
                  "name": "shop.customers", "key": ["id"], "partitionBy": ["day(updated_at)"]},
        "changes": {"format": "debezium"},
        "commit": {"interval": "500ms", "pollInterval": "100ms"},
    }


def load_table(sync: Any, rows: int) -> None:
    """``rows`` rows written by the sink's writer and appended in one snapshot."""
    from pyiceberg.table import Transaction

    from icebergsync.catalog import ensure_table, open_catalog
    from icebergsync.schema import iceberg_schema
    from icebergsync.spec import effective_columns
    from spark_app.iceberg import internals
    from spark_app.staging.writer import PartitionedWriter, conform, table_plan

    internals.install_v3_metadata_writer()  # a format-version 3 table is created and committed here
    table_spec = sync.spec.table
    catalog = open_catalog(table_spec.catalog_or_default)
    table = ensure_table(catalog, table_spec.name, iceberg_schema(effective_columns(sync.spec)), table_spec.partition_by,
                         dict(table_spec.properties), key=table_spec.key)
    plan = table_plan(table)
    writer = PartitionedWriter(plan, "bench-load", 128 * 1024 * 1024, 512 * 1024 * 1024)
    start_us = int(START.timestamp() * 1_000_000)
    for first in range(0, rows, LOAD_BATCH_ROWS):
        ids = pa.array(range(first, min(rows, first + LOAD_BATCH_ROWS)), pa.int64())
        moments = pc.add(pc.multiply(ids, int(SECONDS_PER_ID * 1_000_000)), start_us)
        batch = pa.RecordBatch.from_pydict({
            "id": ids, "name": pc.binary_join_element_wise("customer ", pc.cast(ids, pa.string()), ""),
            "updated_at": moments.cast(pa.timestamp("us", tz="UTC")),
        })
        writer.write(conform(batch, plan.arrow_schema()))
    transaction = Transaction(table)
    internals.row_delta(transaction, {"bench": "load"}, writer.finish(), [], [])
    internals.commit_transaction(catalog, table, transaction)


def change_file(path: Path, rows: int, changes: int, workload: str, first_new_id: int, rng: random.Random,
                lsn: int) -> int:
    """One trigger's Debezium changes; returns the next id no row has yet."""
    today = START + timedelta(seconds=rows * SECONDS_PER_ID)
    lines = []
    for number in range(changes):
        if workload == "recent" and number % 2 == 0:
            key, op, first_new_id = first_new_id, "c", first_new_id + 1
        elif workload == "recent":
            key, op = rows - 1 - rng.randrange(max(1, rows // 100)), "u"
        else:
            key, op = rng.randrange(rows), "u"
        after = {"id": key, "name": f"customer {key} v{lsn + number}", "updated_at": today.isoformat()}
        lines.append(json.dumps({"before": None, "after": after, "op": op, "source": {"lsn": lsn + number}}))
    path.write_text("\n".join(lines) + "\n")
    return first_new_id


def run_size(spark: Any, workdir: Path, rows: int, workload: str, args: argparse.Namespace) -> list[float]:
    """Load a table of ``rows`` rows, then time ``args.triggers`` triggers of ``workload``."""
    from icebergsync.catalog import open_catalog

    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "inbox").mkdir(parents=True)
    sync = SyncInThread(sync_document("scale", spec(workdir)), spark)
    started = time.perf_counter()
    load_table(sync.sync, rows)
    print(f"[scale] {workload} {rows:,}: loaded in {time.perf_counter() - started:.0f} s", flush=True)
    catalog = open_catalog(sync.sync.spec.table.catalog_or_default)
    sync.start()
    rng, next_id, times = random.Random(7), rows, []
    for number in range(args.triggers):
        staged = workdir / f"{number:05d}.json.tmp"
        next_id = change_file(staged, rows, args.changes, workload, next_id, rng, 1 + number * args.changes)
        arrived = time.perf_counter()
        staged.rename(workdir / "inbox" / f"{number:05d}.json")
        while not committed_through(catalog, "shop.customers", f"{number:05d}.json"):
            sync.check()
            time.sleep(0.05)
        times.append(time.perf_counter() - arrived)
        print(f"[scale] {workload} {rows:,}: trigger {number + 1} in {times[-1]:.1f} s", flush=True)
    sync.stop()
    return times


def _warm_median(times: list[float]) -> float:
    return statistics.median(times[1:] or times)


def render(results: dict[str, Any], args: argparse.Namespace) -> str:
    smallest, largest = min(args.rows), max(args.rows)
    lines = [
        "# A keyed trigger's cost against the table's size",
        "",
        "Generated by `python -m bench.scale` (bench/scale.py; the method is in its docstring). Triggers of",
        f"{args.changes:,} Debezium changes each on keyed tables of {', '.join(f'{r:,}' for r in args.rows)} rows;",
        f"the target: a trigger on {largest:,} rows within 1.5x of the same trigger on {smallest:,}.",
        "",
        f"Run: {results['date']} on {results['machine']['nproc']} cores of a shared machine (noisy); load average "
        f"before {results['load_before']}, after {results['load_after']}.",
        "",
        "| workload | rows | trigger times (the first is cold) | median of the later | vs the smallest table |",
        "| --- | ---: | --- | ---: | ---: |",
    ]
    for workload, by_size in results["runs"].items():
        base = _warm_median(by_size[str(smallest)])
        for rows in args.rows:
            times = by_size[str(rows)]
            lines.append(f"| {workload} | {rows:,} | {', '.join(f'{t:.1f} s' for t in times)} "
                         f"| {_warm_median(times):.1f} s | {_warm_median(times) / base:.2f}x |")
    lines += ["", "Machine: " + ", ".join(f"{k} {v}" for k, v in results["machine"].items()), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 20_000_000])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--triggers", type=int, default=4)
    parser.add_argument("--workload", choices=["recent", "uniform"], nargs="+", default=["recent", "uniform"])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    spark = iceberg_session("bench-scale", workdir / "unused-warehouse")
    load_before = " ".join(f"{x:.1f}" for x in load_average())
    runs = {workload: {str(rows): run_size(spark, workdir / f"{workload}-{rows}", rows, workload, args)
                       for rows in args.rows} for workload in args.workload}
    results = {"runs": runs, "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
               "load_before": load_before, "load_after": " ".join(f"{x:.1f}" for x in load_average())}
    spark.stop()
    publish(render(results, args), args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
