"""One benchmark cell in its own process: ``python -m bench.support.worker CELL.json RESULT.json STDERR_LOG``.

A cell is one contender on one layout and size, run ``runs`` times after a warm-up, in one
process (one Spark session), so the peak RSS figures belong to that contender alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bench.support.common import (
    CORES,
    GENERATOR_BYTES_PER_ROW,
    Cell,
    TreeSampler,
    arrow_schema,
    data_dir,
    file_report,
    iceberg_runtime_jar,
    load_data,
    now,
)

SESSION_CONF = {"spark.driver.maxResultSize": "0", "spark.ui.showConsoleProgress": "false"}
COMMIT_LINE = re.compile(r"records=(\d+) .*files=(\d+) bytes=(\d+) commit_ms=(\d+)")
NATIVE_COMMIT_LINE = re.compile(r"Committed in (\d+) ms")


def triggers(rows: int, per_trigger: int) -> list[tuple[int, int]]:
    return [(start, min(rows, start + per_trigger)) for start in range(0, rows, per_trigger)]


def parallelism(rows_per_trigger: int, target: int) -> int:
    """The number of tasks our generator source plans for a trigger (Source.parallelism)."""
    return max(1, min(CORES, -(-(rows_per_trigger * GENERATOR_BYTES_PER_ROW) // target)))


def steady(commits: list[dict[str, Any]], started: float, finished: float, rows: int) -> dict[str, Any]:
    """Throughput over the triggers after the first (steady state) and end to end."""
    out: dict[str, Any] = {"wall_s": finished - started, "rows": rows}
    if len(commits) >= 2:
        out["steady_rows"] = sum(c["records"] for c in commits[1:])
        out["steady_s"] = commits[-1]["t"] - commits[0]["t"]
    else:
        out["steady_rows"], out["steady_s"] = rows, finished - started
    return out


# -- our sink ---------------------------------------------------------------------------------------

class CommitLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.commits: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        match = COMMIT_LINE.search(record.getMessage())
        if match and record.getMessage().startswith("commit "):
            records, files, size, commit_ms = (int(g) for g in match.groups())
            self.commits.append({"t": now(), "records": records, "files": files, "bytes": size, "commit_ms": commit_ms})


def sink_document(directory: Path, cell: Cell, rows: int, per_trigger: int) -> dict[str, Any]:
    return {
        "apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
        "metadata": {"name": "bench", "namespace": "bench"},
        "spec": {
            "source": {"generator": {"rowsPerSecond": 10**12, "totalRows": rows, "maxRowsPerTrigger": per_trigger}},
            "table": {
                "catalog": {"type": "sql", "uri": f"sqlite:///{directory}/catalog.db", "warehouse": str(directory / "wh")},
                "name": "bench.trips",
                "partitionBy": cell.partition_by,
                "properties": {"write.parquet.compression-codec": "zstd"},
            },
            # Commit as soon as a trigger's rows are available: the trigger is exactly maxRowsPerTrigger.
            "commit": {"interval": "10m", "pollInterval": "10ms", "targetFileSize": str(cell.target_file_bytes),
                       "maxStagedSize": str(per_trigger * GENERATOR_BYTES_PER_ROW)},
        },
    }


def pyiceberg_files(table: Any) -> tuple[list[dict[str, Any]], int]:
    """(files with the snapshot that added them, number of snapshots) of a pyiceberg table."""
    files = []
    for snapshot in table.snapshots():
        for manifest in snapshot.manifests(table.io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.snapshot_id != snapshot.snapshot_id:
                    continue
                data_file = entry.data_file
                files.append({"snapshot": snapshot.snapshot_id, "partition": repr(data_file.partition),
                              "path": data_file.file_path, "size": data_file.file_size_in_bytes})
    return files, len(table.snapshots())


class SinkContender:
    def __init__(self, cell: Cell, spark: Any):
        self.cell, self.spark = cell, spark
        self.lines = CommitLines()
        logger = logging.getLogger("icebergsync.job")
        logger.setLevel(logging.INFO)
        logger.addHandler(self.lines)

    def _run(self, name: str, rows: int, per_trigger: int) -> tuple[Any, Path]:
        from icebergsync.spec import parse_spec
        from spark_app.job.loop import SyncJob

        directory = Path(self.cell.workdir) / "tables" / name
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        sync = parse_spec(sink_document(directory, self.cell, rows, per_trigger))
        summary = SyncJob(sync, 1, self.spark).run()
        assert summary.records == rows, (summary.records, rows)
        return sync, directory

    def warmup(self) -> None:
        rows = self.cell.warmup_rows
        _, directory = self._run("warmup", rows, max(1, rows // 2))
        shutil.rmtree(directory, ignore_errors=True)

    def run(self, index: int, sampler: TreeSampler) -> dict[str, Any]:
        from icebergsync.catalog import open_catalog

        self.lines.commits.clear()
        sampler.window()
        started = now()
        sync, directory = self._run(f"run{index}", self.cell.rows, self.cell.rows_per_trigger)
        finished = now()
        peak = sampler.close_window()
        commits = list(self.lines.commits)
        table = open_catalog(sync.spec.table.catalog_or_default).load_table(sync.spec.table.name)
        files, snapshots = pyiceberg_files(table)
        shutil.rmtree(directory, ignore_errors=True)
        return {**steady(commits, started, finished, self.cell.rows), "commits": commits, "peak": peak.as_dict(),
                "files": file_report(files, self.cell.target_file_bytes), "snapshots": snapshots,
                "tasks_per_trigger": parallelism(self.cell.rows_per_trigger, self.cell.target_file_bytes),
                "commit_ms_source": "commit log line (load + build manifests + catalog CAS + reload)"}


# -- Spark's native Iceberg writer ------------------------------------------------------------------

class NativeContender:
    """``df.writeTo(table).append()`` per micro-batch into a Hadoop-catalog table in a temp warehouse."""

    def __init__(self, cell: Cell, spark: Any, stderr_log: Path):
        self.cell, self.spark, self.stderr_log = cell, spark, stderr_log
        jvm = spark.sparkContext._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "org.apache.iceberg.spark.source.SparkWrite", jvm.org.apache.logging.log4j.Level.INFO)
        spark.sql("CREATE NAMESPACE IF NOT EXISTS bench.db")

    def _ddl(self) -> str:
        from spark_app.sources.generator import generate

        schema = generate(self.spark.range(0, 1)).schema
        return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)

    def _create(self, name: str) -> str:
        table = f"bench.db.{name}"
        self.spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
        partitioned = "PARTITIONED BY (days(ts), bucket(16, vendor))" if self.cell.layout == "partitioned" else ""
        properties = {
            "format-version": "2",
            "write.target-file-size-bytes": str(self.cell.target_file_bytes),
            "write.parquet.compression-codec": "zstd",
            "write.distribution-mode": self.cell.variant or "none",
            # With distribution "none", Iceberg asks Spark to sort each task by partition unless the
            # fan-out writer is on; fan-out is the same strategy as our sink (one open writer per partition).
            "write.spark.fanout.enabled": "true" if (self.cell.variant or "none") == "none" else "false",
        }
        props = ", ".join(f"'{k}'='{v}'" for k, v in properties.items())
        self.spark.sql(f"CREATE TABLE {table} ({self._ddl()}) USING iceberg {partitioned} TBLPROPERTIES ({props})")
        return table

    def _append_all(self, table: str, rows: int, per_trigger: int) -> list[dict[str, Any]]:
        from spark_app.sources.generator import generate

        parts = parallelism(per_trigger, self.cell.target_file_bytes)
        commits = []
        for start, end in triggers(rows, per_trigger):
            generate(self.spark.range(start, end, 1, parts)).writeTo(table).append()
            commits.append({"t": now(), "records": end - start})
        return commits

    def warmup(self) -> None:
        table = self._create("warmup")
        self._append_all(table, self.cell.warmup_rows, max(1, self.cell.warmup_rows // 2))
        self.spark.sql(f"DROP TABLE {table} PURGE")

    def _log_size(self) -> int:
        return self.stderr_log.stat().st_size if self.stderr_log.exists() else 0

    def run(self, index: int, sampler: TreeSampler) -> dict[str, Any]:
        table = self._create(f"run{index}")
        offset = self._log_size()
        sampler.window()
        started = now()
        commits = self._append_all(table, self.cell.rows, self.cell.rows_per_trigger)
        finished = now()
        peak = sampler.close_window()
        time.sleep(0.2)
        with self.stderr_log.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
        commit_ms = [int(m) for m in NATIVE_COMMIT_LINE.findall(text)]
        if len(commit_ms) == len(commits):
            for commit, ms in zip(commits, commit_ms, strict=True):
                commit["commit_ms"] = ms
        partition = "to_json(data_file.partition)" if self.cell.layout == "partitioned" else "'{}'"
        rows = self.spark.sql(
            f"SELECT snapshot_id, {partition} AS p, data_file.file_path AS path, "
            f"data_file.file_size_in_bytes AS size FROM {table}.entries WHERE status = 1").collect()
        files = [{"snapshot": r["snapshot_id"], "partition": r["p"], "path": r["path"], "size": r["size"]} for r in rows]
        snapshots = self.spark.sql(f"SELECT count(*) AS n FROM {table}.snapshots").collect()[0]["n"]
        counted = self.spark.table(table).count()
        assert counted == self.cell.rows, (counted, self.cell.rows)
        self.spark.sql(f"DROP TABLE {table} PURGE")
        return {**steady(commits, started, finished, self.cell.rows), "commits": commits, "peak": peak.as_dict(),
                "files": file_report(files, self.cell.target_file_bytes), "snapshots": snapshots,
                "tasks_per_trigger": parallelism(self.cell.rows_per_trigger, self.cell.target_file_bytes)
                if self.cell.variant != "hash" else None,
                "commit_ms_source": "SparkWrite log 'Committed in N ms' (manifests + catalog commit)"
                if len(commit_ms) == len(commits) else f"not observable ({len(commit_ms)} log lines)"}


# -- Spark side alone: generator → Arrow → Python worker that only counts ---------------------------

class NoopContender:
    """What our sink costs before the writer: the same trigger plan with a mapInArrow that writes nothing."""

    def __init__(self, cell: Cell, spark: Any):
        self.cell, self.spark = cell, spark

    def _go(self, rows: int, per_trigger: int) -> list[dict[str, Any]]:
        import pyarrow as pa

        from icebergsync.spec import GENERATOR_COLUMNS
        from spark_app.decoding.deadletter import with_control_columns
        from spark_app.sources.generator import generate
        from spark_app.staging.transform import select_declared

        def count(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            total = 0
            for batch in batches:
                total += batch.num_rows
            yield pa.RecordBatch.from_pydict({"n": [total]})

        parts = parallelism(per_trigger, self.cell.target_file_bytes)
        commits = []
        for start, end in triggers(rows, per_trigger):
            frame = select_declared(with_control_columns(generate(self.spark.range(start, end, 1, parts))),
                                    list(GENERATOR_COLUMNS))
            got = sum(r["n"] for r in frame.mapInArrow(count, "n long").collect())
            assert got == end - start
            commits.append({"t": now(), "records": end - start})
        return commits

    def warmup(self) -> None:
        self._go(self.cell.warmup_rows, max(1, self.cell.warmup_rows // 2))

    def run(self, index: int, sampler: TreeSampler) -> dict[str, Any]:
        sampler.window()
        started = now()
        commits = self._go(self.cell.rows, self.cell.rows_per_trigger)
        finished = now()
        peak = sampler.close_window()
        return {**steady(commits, started, finished, self.cell.rows), "commits": commits, "peak": peak.as_dict()}


class JvmNoopContender(NoopContender):
    """The generator alone in the JVM: the same ranges written to Spark's ``noop`` data source."""

    def _go(self, rows: int, per_trigger: int) -> list[dict[str, Any]]:
        from spark_app.sources.generator import generate

        parts = parallelism(per_trigger, self.cell.target_file_bytes)
        commits = []
        for start, end in triggers(rows, per_trigger):
            generate(self.spark.range(start, end, 1, parts)).write.format("noop").mode("overwrite").save()
            commits.append({"t": now(), "records": end - start})
        return commits


# -- pyiceberg append loop (naive floor) ------------------------------------------------------------

class NaiveContender:
    """One Python process: ``table.append(arrow_slice)`` per micro-batch (pyiceberg's own writer).

    With a Spark session (contender "naive") each micro-batch is generated by Spark and collected
    to the driver with ``toArrow()``, the path a user without a sink would write; without one
    (contender "pyiceberg") the slices come from the pre-generated Arrow cache (writer cost only).
    """

    def __init__(self, cell: Cell, spark: Any = None):
        self.cell, self.spark = cell, spark
        self.data = None if spark is not None else load_data(Path(cell.workdir), max(cell.rows, cell.warmup_rows))
        self.schema = arrow_schema()

    def _slice(self, start: int, end: int) -> Any:
        if self.data is not None:
            return self.data.slice(start, end - start)
        from spark_app.sources.generator import generate
        from spark_app.staging.writer import conform

        parts = parallelism(end - start, self.cell.target_file_bytes)
        arrow = generate(self.spark.range(start, end, 1, parts)).toArrow()
        import pyarrow as pa

        return pa.concat_tables([conform(batch, self.schema) for batch in arrow.to_batches()])

    def _table(self, name: str) -> tuple[Any, Path]:
        from pyiceberg.catalog.sql import SqlCatalog

        from icebergsync.catalog import partition_spec
        from icebergsync.schema import iceberg_schema
        from icebergsync.spec import GENERATOR_COLUMNS

        directory = Path(self.cell.workdir) / "tables" / name
        shutil.rmtree(directory, ignore_errors=True)
        (directory / "wh").mkdir(parents=True)
        catalog = SqlCatalog("bench", uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/wh")
        catalog.create_namespace("bench")
        schema = iceberg_schema(list(GENERATOR_COLUMNS))
        table = catalog.create_table(
            "bench.trips", schema, partition_spec=partition_spec(schema, self.cell.partition_by),
            properties={"write.target-file-size-bytes": str(self.cell.target_file_bytes),
                        "write.parquet.compression-codec": "zstd"})
        return table, directory

    def _go(self, table: Any, rows: int, per_trigger: int) -> list[dict[str, Any]]:
        commits = []
        for start, end in triggers(rows, per_trigger):
            transaction = table.transaction()
            transaction.append(self._slice(start, end))  # writes the files and the manifests
            before = now()
            transaction.commit_transaction()  # the catalog commit
            done = now()
            commits.append({"t": done, "records": end - start, "commit_ms": (done - before) * 1000})
        return commits

    def warmup(self) -> None:
        table, directory = self._table("warmup")
        self._go(table, self.cell.warmup_rows, max(1, self.cell.warmup_rows // 2))
        shutil.rmtree(directory, ignore_errors=True)

    def run(self, index: int, sampler: TreeSampler) -> dict[str, Any]:
        table, directory = self._table(f"run{index}")
        sampler.window()
        started = now()
        commits = self._go(table, self.cell.rows, self.cell.rows_per_trigger)
        finished = now()
        peak = sampler.close_window()
        files, snapshots = pyiceberg_files(table)
        shutil.rmtree(directory, ignore_errors=True)
        return {**steady(commits, started, finished, self.cell.rows), "commits": commits, "peak": peak.as_dict(),
                "files": file_report(files, self.cell.target_file_bytes), "snapshots": snapshots,
                "commit_ms_source": "commit_transaction() only (pyiceberg writes manifests inside append)"}


# -- raw pyarrow Parquet encode (ceiling) -----------------------------------------------------------

def encode(table: Any, directory: str, target: int, name: str) -> tuple[int, int]:
    """Encode ``table`` to zstd Parquet files of about ``target`` bytes under ``directory``; (files, bytes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    probe = table.slice(0, min(100_000, table.num_rows))
    sink = pa.BufferOutputStream()
    pq.write_table(probe, sink, compression="zstd", store_decimal_as_integer=True)
    per_row = max(1.0, sink.getvalue().size / max(1, probe.num_rows))
    rows_per_file = max(1, int(target / per_row))
    files = size = 0
    for offset in range(0, table.num_rows, rows_per_file):
        path = f"{directory}/{name}-{files:05d}.parquet"
        chunk = table.slice(offset, rows_per_file)
        pq.write_table(chunk, path, compression="zstd", store_decimal_as_integer=True,
                       row_group_size=max(1, -(-chunk.num_rows // 4)))
        files += 1
        size += os.path.getsize(path)
        os.remove(path)
    return files, size


def _encode_part(args: tuple[str, int, int, int, str, int]) -> tuple[int, int]:
    workdir, start, stop, _rows, directory, target = args
    table = load_data(Path(workdir), stop).slice(start, stop - start)
    return encode(table, directory, target, f"p{start}")


class CeilingContender:
    """Raw ``pyarrow.parquet`` encode of the same rows to zstd Parquet in /dev/shm; ``procs`` processes."""

    def __init__(self, cell: Cell, procs: int):
        self.cell, self.procs = cell, procs
        self.data = load_data(Path(cell.workdir), max(cell.rows, cell.warmup_rows))
        self.directory = Path("/dev/shm") / f"icebergsync-bench-encode-{os.getpid()}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pool = None
        if procs > 1:
            import multiprocessing

            self.pool = multiprocessing.get_context("fork").Pool(procs)

    def _go(self, rows: int) -> tuple[int, int]:
        if self.pool is None:
            return encode(self.data.slice(0, rows), str(self.directory), self.cell.target_file_bytes, "c")
        step = -(-rows // self.procs)
        jobs = [(self.cell.workdir, s, min(rows, s + step), rows, str(self.directory), self.cell.target_file_bytes)
                for s in range(0, rows, step)]
        results = self.pool.map(_encode_part, jobs)
        return sum(r[0] for r in results), sum(r[1] for r in results)

    def warmup(self) -> None:
        self._go(self.cell.warmup_rows)

    def run(self, index: int, sampler: TreeSampler) -> dict[str, Any]:
        sampler.window()
        started = now()
        files, size = self._go(self.cell.rows)
        finished = now()
        peak = sampler.close_window()
        return {"wall_s": finished - started, "rows": self.cell.rows, "steady_rows": self.cell.rows,
                "steady_s": finished - started, "peak": peak.as_dict(), "encoded_files": files, "encoded_bytes": size}

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        shutil.rmtree(self.directory, ignore_errors=True)


# -- data preparation -------------------------------------------------------------------------------

def prepare(cell: Cell, spark: Any) -> dict[str, Any]:
    """Write generator rows [0, rows) as Arrow IPC files (the table's Arrow schema) for naive and ceiling."""
    import pyarrow as pa

    from spark_app.sources.generator import generate
    from spark_app.staging.writer import conform

    out = data_dir(Path(cell.workdir))
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    schema = arrow_schema()
    directory = str(out)

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.ipc as ipc
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None, "runs in a Spark task"
        path = f"{directory}/part-{context.partitionId():05d}.arrow"
        rows = 0
        with ipc.new_file(path, schema) as writer:
            for batch in batches:
                for b in conform(batch, schema).to_batches():
                    writer.write_batch(b)
                rows += batch.num_rows
        yield pa.RecordBatch.from_pydict({"n": [rows]})

    parts = max(1, math.ceil(cell.rows / 1_000_000))
    written = sum(r["n"] for r in generate(spark.range(0, cell.rows, 1, parts)).mapInArrow(write, "n long").collect())
    (out / "ROWS").write_text(str(written))
    table = load_data(Path(cell.workdir), min(written, 1_000_000))
    return {"rows": written, "arrow_bytes_per_row": table.nbytes / table.num_rows}


# -- py-spy ---------------------------------------------------------------------------------------

@contextlib.contextmanager
def profiled(cell: Cell, sampler: TreeSampler, out: Path) -> Iterator[None]:
    """py-spy record of the Python workers (daemon and its forks) while the block runs."""
    from bench.support.common import bench_deps

    spy = shutil.which("py-spy") or next((str(p) for p in (Path(sys.executable).parent / "py-spy",
                                                          bench_deps() / "bin" / "py-spy") if p.exists()), "py-spy")
    pids = sampler.worker_pids()
    process = None
    if cell.profile and pids and Path(spy).exists():
        daemon = min(pids)
        process = subprocess.Popen([spy, "record", "--pid", str(daemon), "--subprocesses", "--rate", "97",
                                    "--format", "raw", "--output", str(out), "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)
    try:
        yield
    finally:
        if process is not None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


# -- main -----------------------------------------------------------------------------------------

def main() -> int:
    cell_path, result_path, stderr_log = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    cell = Cell(**json.loads(cell_path.read_text()))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    sampler = TreeSampler()
    spark = None
    result: dict[str, Any] = {"cell": cell.__dict__, "runs": []}
    if cell.contender in ("sink", "native", "noop", "jvm-noop", "naive", "prepare"):
        from spark_app.job.session import build_session

        conf = dict(SESSION_CONF)
        if cell.contender == "native":
            warehouse = Path(cell.workdir) / "tables" / f"native-wh-{cell.name()}"
            shutil.rmtree(warehouse, ignore_errors=True)
            conf.update({
                "spark.driver.extraClassPath": iceberg_runtime_jar(),
                "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
                "spark.sql.catalog.bench": "org.apache.iceberg.spark.SparkCatalog",
                "spark.sql.catalog.bench.type": "hadoop",
                "spark.sql.catalog.bench.warehouse": warehouse.as_uri(),
            })
        spark = build_session(f"bench-{cell.name()}", f"local[{CORES}]", conf)
    try:
        if cell.contender == "prepare":
            result["prepare"] = prepare(cell, spark)
        else:
            if cell.contender == "sink":
                contender: Any = SinkContender(cell, spark)
            elif cell.contender == "native":
                contender = NativeContender(cell, spark, stderr_log)
            elif cell.contender == "noop":
                contender = NoopContender(cell, spark)
            elif cell.contender == "jvm-noop":
                contender = JvmNoopContender(cell, spark)
            elif cell.contender == "naive":
                contender = NaiveContender(cell, spark)
            elif cell.contender == "pyiceberg":
                contender = NaiveContender(cell)
            elif cell.contender in ("ceiling", "ceiling2"):
                contender = CeilingContender(cell, 1 if cell.contender == "ceiling" else CORES)
            else:
                raise ValueError(cell.contender)
            started = now()
            contender.warmup()
            result["warmup_s"] = now() - started
            for index in range(cell.runs):
                profile_out = Path(cell.extra.get("profile_out", "")) if index == 0 and cell.profile else None
                if profile_out is not None:
                    with profiled(cell, sampler, profile_out):
                        result["runs"].append(contender.run(index, sampler))
                else:
                    result["runs"].append(contender.run(index, sampler))
                print(f"[bench] {cell.name()} run {index}: {json.dumps(_brief(result['runs'][-1]))}",
                      file=sys.stderr, flush=True)
            if hasattr(contender, "close"):
                contender.close()
    finally:
        if spark is not None:
            spark.stop()
        sampler.stop()
    result_path.write_text(json.dumps(result, indent=1, default=str))
    return 0


def _brief(run: dict[str, Any]) -> dict[str, Any]:
    rate = run["steady_rows"] / run["steady_s"] if run.get("steady_s") else 0
    return {"rows_per_s": round(rate), "wall_s": round(run["wall_s"], 2),
            "peak_pyworker_mb": run["peak"]["pyworker_max"] // 2**20, "cpu_s": run["peak"]["cpu_seconds"]}


if __name__ == "__main__":
    sys.exit(main())
