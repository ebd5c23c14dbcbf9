"""IcebergSync against what a user would run instead, side by side in one run.

    .venv/bin/python -m bench.run                 # 3,000,000 rows in 30 JSON and 30 Parquet files and on Kafka, 3 rounds (12 min measured)
    .venv/bin/python -m bench.run --quick         # 300,000 rows, 1 round: checks the harness (3 min idle, 10-17 min at load 8-19)
    .venv/bin/python -m bench.run --render        # re-render results.md from results.json

Contenders, all on local[2] (the same two cores), zstd, the same target file size, the same table
(schema, ``day(ts)`` partitioning or none) and the same rows:
  sink  files   ``icebergsync run SPEC`` (the product's CLI: embedded SQLite catalog, local warehouse)
                with the files source on the JSON-lines directory
  spark files   Spark Structured Streaming's file source → Iceberg (``trigger(availableNow=True)``)
  sink  kafka   ``icebergsync run SPEC`` with the Kafka source on a topic holding the same lines
  spark kafka   Spark's Kafka source → ``from_json`` → Iceberg (``availableNow``)
  sink  parquet / spark parquet   the files contenders on the same rows as Parquet files (zstd): the
                input costs little to decode, so the data plane's own overhead shows against the encode
  encode        pyarrow writing the same rows into the sink's files on one thread (the per-core ceiling),
                and pyarrow parsing the JSON files on one thread (parse + encode: the ceiling for JSON)
Every trigger holds the same share of the input for every contender (``--triggers``). Contenders
run interleaved, round after round; each run is checked (count and checksum of its table, read
back with pyiceberg) against the source rows. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.support.common import REPO, bench_deps, load_average, machine, parse_count, parse_size
from bench.support.dataset import (
    SHAPES,
    checksum,
    make_rows,
    spec_schema,
    write_json_files,
    write_parquet_files,
)
from bench.support.measure import cpu_at

DEFAULT_OUT = REPO / "docs" / "benchmarks"
ENGINES = ("sink", "spark")
MiB = 1024 * 1024


def per_trigger(total: int, triggers: int) -> int:
    return max(1, math.ceil(total / max(1, triggers)))


def run_order(keys: list[str], round_index: int) -> list[str]:
    """The round's order: pairs (sink, spark) of one source and layout stay adjacent; who goes first
    alternates between rounds, and the pairs rotate, so no contender always follows the same one."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for key in keys:
        _engine, source, layout = key.split("-")
        pairs.setdefault((source, layout), []).append(key)
    ordered = list(pairs.values())
    shift = round_index % len(ordered) if ordered else 0
    ordered = ordered[shift:] + ordered[:shift]
    out = []
    for pair in ordered:
        pair = sorted(pair, key=lambda k: ENGINES.index(k.split("-")[0]))
        out.extend(pair if round_index % 2 == 0 else list(reversed(pair)))
    return out


def median_spread(values: list[Any]) -> dict[str, float] | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


# -- processes and tables ---------------------------------------------------------------------------

def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of the live processes under ``root``: the Kafka broker's share."""
    from bench.support.measure import descendants, own_cpu

    seen: dict[tuple[int, int], float] = {}
    own_cpu(descendants(root), seen)
    return sum(seen.values())


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def open_table(kind: str, directory: Path) -> Any:
    if kind == "sink":
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("icebergsync", uri=f"sqlite:///{directory}/catalog.db", warehouse=(directory / "wh").as_uri())
        return catalog.load_table("bench.trips")
    from pyiceberg.table import StaticTable

    metadata = directory / "wh" / "bench" / "trips" / "metadata"
    hint = (metadata / "version-hint.text").read_text().strip()
    return StaticTable.from_metadata(str(metadata / f"v{hint}.metadata.json"))


def steady(commits: list[tuple[float, int]], timeline: list[list[float]]) -> dict[str, Any]:
    """Rows of commits 2..n over the time (and CPU) from the first data commit to the last: the rate
    once the process, the session and the first trigger are up (start-up is time to first commit)."""
    if len(commits) < 2 or commits[-1][0] <= commits[0][0]:
        return {}
    rows = sum(records for _t, records in commits[1:])
    seconds = commits[-1][0] - commits[0][0]
    out: dict[str, Any] = {"steady_rows": rows, "steady_s": seconds, "steady_rows_per_s": rows / seconds}
    first, last = cpu_at(timeline, commits[0][0]), cpu_at(timeline, commits[-1][0])
    if first is not None and last is not None and last > first:
        out.update({"steady_cpu_s": last - first, "steady_rows_per_cpu_s": rows / (last - first)})
    return out


def table_facts(table: Any, start_epoch: float, verify: bool) -> dict[str, Any]:
    """Snapshots, data files and bytes of the current snapshot, and (``verify``) count and checksum."""
    data_snapshots = sorted(
        (s for s in table.snapshots() if int((s.summary or {}).get("added-records", 0) or 0) > 0),
        key=lambda s: s.timestamp_ms)
    files = list(table.scan().plan_files())
    facts: dict[str, Any] = {
        "commit_times": [(s.timestamp_ms / 1000 - start_epoch, int(s.summary["added-records"]))
                         for s in data_snapshots],
        "commits": len(data_snapshots), "snapshots": len(table.snapshots()),
        "first_commit_s": data_snapshots[0].timestamp_ms / 1000 - start_epoch if data_snapshots else None,
        "last_commit_s": data_snapshots[-1].timestamp_ms / 1000 - start_epoch if data_snapshots else None,
        "data_files": len(files), "data_bytes": sum(f.file.file_size_in_bytes for f in files),
        "table_rows": sum(f.file.record_count for f in files),
    }
    if verify:
        facts.update({f"read_{k}": v for k, v in checksum(table.scan().to_arrow()).items()})
    return facts


# -- one run ----------------------------------------------------------------------------------------

class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.workdir: Path = args.workdir
        self.rows, self.files = args.rows, args.files
        self.target = parse_size(args.target_file_size)
        self.files_per_trigger = per_trigger(self.files, args.triggers)
        self.records_per_trigger = per_trigger(self.rows, args.triggers)
        shape = "" if args.shape == "flat" else f"-{args.shape}"
        self.data_dir = self.workdir / "data" / f"rows{self.rows}-files{self.files}-days{args.days}{shape}"
        self.parquet_dir = self.data_dir.with_name(self.data_dir.name + "-parquet")
        self.logs = self.workdir / "logs"
        self.broker: Any = None
        self.topic = f"trips-{self.rows}-{self.files}-{args.days}{shape}"
        from tests.infra.services import spark_classpath

        self.iceberg_cp = spark_classpath("iceberg-spark")
        self.kafka_cp = spark_classpath("kafka-connector")

    # data ------------------------------------------------------------------------------------
    def prepare_data(self) -> dict[str, Any]:
        meta_path = self.data_dir.with_name(self.data_dir.name + ".meta.json")  # not in the directory: every file there is input
        if meta_path.exists():
            meta: dict[str, Any] = json.loads(meta_path.read_text())
            if "parquet_bytes" not in meta:  # data made before the Parquet contenders
                shutil.rmtree(self.parquet_dir, ignore_errors=True)
                meta["parquet_bytes"] = write_parquet_files(self.parquet_dir, self.rows, self.files, self.args.days)
                meta_path.write_text(json.dumps(meta))
            return meta
        shutil.rmtree(self.data_dir, ignore_errors=True)
        shutil.rmtree(self.parquet_dir, ignore_errors=True)
        started = time.monotonic()
        meta = write_json_files(self.data_dir, self.rows, self.files, self.args.days, self.args.shape)
        per_file = -(-self.rows // self.files)
        total = 0
        for index in range(self.files):
            count = max(0, min(per_file, self.rows - index * per_file))
            if count:
                total += int(checksum(make_rows(index * per_file, count, self.rows, self.args.days))["checksum"], 16)
        meta["checksum"] = f"{total % 2**64:016x}"
        meta["parquet_bytes"] = write_parquet_files(self.parquet_dir, self.rows, self.files, self.args.days) \
            if self.args.shape == "flat" else 0
        meta["prepare_s"] = round(time.monotonic() - started, 1)
        meta_path.write_text(json.dumps(meta))
        return meta

    def start_kafka(self) -> dict[str, Any]:
        from tests.infra.services import start_kafka

        directory = self.workdir / "kafka"
        shutil.rmtree(directory, ignore_errors=True)
        started = time.monotonic()
        self.broker = start_kafka(directory)
        self.broker.create_topic(self.topic, self.args.kafka_partitions)
        config = {"mode": "produce", "cores": self.args.cores, "classpath": self.kafka_cp,
                  "files_dir": str(self.data_dir), "bootstrap": self.broker.bootstrap_servers, "topic": self.topic}
        path = self.workdir / "produce.json"
        path.write_text(json.dumps(config))
        with (self.logs / "produce.log").open("wb") as log:
            subprocess.run([sys.executable, "-m", "bench.support.peer", str(path)], cwd=REPO, env=self.env(), stdout=log,
                           stderr=subprocess.STDOUT, check=True, timeout=3600)
        ends = self.broker.end_offsets(self.topic)
        if sum(ends.values()) != self.rows:
            raise RuntimeError(f"topic {self.topic} holds {sum(ends.values())} records, {self.rows} expected")
        return {"topic": self.topic, "partitions": len(ends), "records_per_partition": ends,
                "produce_s": round(time.monotonic() - started, 1)}

    def stop_kafka(self) -> None:
        if self.broker is not None:
            from tests.infra.services import stop_kafka

            stop_kafka(self.broker)
            self.broker = None

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                "PYSPARK_PYTHON": sys.executable}

    # contenders ------------------------------------------------------------------------------
    def sink_command(self, source: str, layout: str, directory: Path) -> list[str]:
        if source in ("files", "parquet"):
            spec_source: dict[str, Any] = {"files": {
                "path": str(self.data_dir if source == "files" else self.parquet_dir),
                "format": "json" if source == "files" else "parquet", "maxFilesPerTrigger": self.files_per_trigger}}
        else:
            spec_source = {"kafka": {"bootstrapServers": self.broker.bootstrap_servers, "topic": self.topic,
                                     "startingOffsets": "earliest", "maxRecordsPerTrigger": self.records_per_trigger}}
        document = {
            "apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
            "metadata": {"name": "bench", "namespace": "bench"},
            "spec": {
                "source": spec_source,
                "schema": spec_schema(self.args.shape),
                "eventTimeColumn": "ts",
                "table": {
                    "catalog": {"type": "sql", "uri": f"sqlite:///{directory}/catalog.db",
                                "warehouse": str(directory / "wh")},
                    "name": "bench.trips",
                    "partitionBy": ["day(ts)"] if layout == "partitioned" else [],
                    "properties": {"write.parquet.compression-codec": "zstd"},
                },
                # A backlog: commit each trigger as soon as it is written (the trigger's size is the
                # source's maxFilesPerTrigger / maxRecordsPerTrigger, the same share as the peers').
                "commit": {"interval": "1ms", "targetFileSize": str(self.target),
                           "maxStagedSize": str(max(1 << 30, 4 * self.trigger_bytes()))},
            },
        }
        spec = directory / "spec.yaml"
        spec.write_text(json.dumps(document, indent=1))
        icebergsync = str(Path(sys.executable).parent / "icebergsync")
        command = [icebergsync, "run", str(spec), "--master", f"local[{self.args.cores}]"]
        if source == "kafka":
            command += ["--conf", f"spark.driver.extraClassPath={self.kafka_cp}"]
        return command

    def trigger_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.data_dir.glob("part-*.json")) // max(1, self.args.triggers)

    def peer_command(self, source: str, layout: str, directory: Path) -> list[str]:
        config = {
            "source": source, "layout": layout, "cores": self.args.cores, "target_file_bytes": self.target,
            "warehouse": str(directory / "wh"), "checkpoint": str(directory / "checkpoint"),
            "classpath": self.iceberg_cp + (os.pathsep + self.kafka_cp if source == "kafka" else ""),
            "files_dir": str(self.data_dir if source != "parquet" else self.parquet_dir),
            "max_files_per_trigger": self.files_per_trigger,
            "bootstrap": self.broker.bootstrap_servers if self.broker else "", "topic": self.topic,
            "max_offsets_per_trigger": self.records_per_trigger, "shape": self.args.shape,
        }
        path = directory / "peer.json"
        path.write_text(json.dumps(config))
        return [sys.executable, "-m", "bench.support.peer", str(path)]

    def run_one(self, key: str, round_index: int, truth: dict[str, Any]) -> dict[str, Any]:
        engine, source, layout = key.split("-")
        name = f"{key}-r{round_index}"
        directory = self.workdir / "runs" / name
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        command = self.sink_command(source, layout, directory) if engine == "sink" else \
            self.peer_command(source, layout, directory)
        result_path, log_path = directory / "measure.json", self.logs / f"{name}.log"
        measure = [sys.executable, "-m", "bench.support.measure", str(result_path), str(log_path),
                   "--timeout", str(self.args.run_timeout)]
        if engine == "sink":
            measure += ["--stop-after-records", str(self.rows)]
        load_before = load_average()[0]
        broker_before = tree_cpu(self.broker._server.proc.pid) if (self.broker and source == "kafka") else None
        subprocess.run([*measure, "--", *command], cwd=REPO, env=self.env(), check=False)
        if not result_path.exists():
            raise RuntimeError(f"bench.support.measure left no result for {name}: see {log_path}")
        measured = json.loads(result_path.read_text())
        run: dict[str, Any] = {"key": key, "engine": engine, "source": source, "layout": layout,
                               "round": round_index, "load_before": load_before, "load_after": load_average()[0],
                               **{k: measured[k] for k in ("exit", "timed_out", "process_wall_s", "cpu_s",
                                                           "peak_rss", "start_epoch")}}
        if measured.get("fenced_s") is not None:  # the sink: process start to its fencing snapshot
            run["fenced_s"] = measured["fenced_s"]
        if broker_before is not None:
            run["broker_cpu_s"] = round(tree_cpu(self.broker._server.proc.pid) - broker_before, 2)
        try:
            table = open_table(engine, directory)
            run.update(table_facts(table, measured["start_epoch"], verify=not self.args.no_verify))
        except Exception as exc:  # a failed run is reported, not fatal
            run["error"] = f"table: {type(exc).__name__}: {exc}"
        run["dir_bytes"] = du(directory / "wh")
        problems = []
        if measured["exit"] != 0 or measured["timed_out"]:
            problems.append(f"exit {measured['exit']}{' (timed out)' if measured['timed_out'] else ''}")
        if run.get("table_rows") != self.rows:
            problems.append(f"table has {run.get('table_rows')} rows, source {self.rows}")
        if not self.args.no_verify and (run.get("read_rows") != truth["rows"]
                                        or run.get("read_checksum") != truth["checksum"]):
            problems.append(f"read back {run.get('read_rows')} rows checksum {run.get('read_checksum')}, "
                            f"source {truth['rows']} rows checksum {truth['checksum']}")
        if problems or "error" in run:
            run["error"] = "; ".join(filter(None, [run.get("error"), *problems]))
            run["log_tail"] = log_path.read_text(errors="replace")[-2500:] if log_path.exists() else ""
        else:
            run["verified"] = not self.args.no_verify
            run["wall_s"] = run["last_commit_s"]
            run["rows_per_s"] = self.rows / run["wall_s"]
            run["rows_per_cpu_s"] = self.rows / run["cpu_s"] if run["cpu_s"] else None
            run.update(steady(run["commit_times"], measured["cpu_timeline"]))
            shutil.copy(result_path, self.logs / f"{name}.measure.json")  # the CPU timeline, for a closer look
            shutil.rmtree(directory, ignore_errors=True)
        status = f"FAILED: {run['error']}" if "error" in run else (
            f"{run['rows_per_s']:,.0f} rows/s, wall {run['wall_s']:.1f}s (process {run['process_wall_s']:.1f}s), "
            f"cpu {run['cpu_s']:.1f}s, first commit {run['first_commit_s']:.1f}s, {run['commits']} commits, "
            f"steady {_f(run.get('steady_rows_per_s'))} rows/s {_f(run.get('steady_rows_per_cpu_s'))} rows/CPU-s, "
            f"{run['data_files']} files {run['data_bytes'] / MiB:.1f} MiB, checksum ok")
        print(f"[bench] round {round_index} {key}: {status} (load {load_before:.1f})", flush=True)
        return run

    def encode(self, round_index: int) -> dict[str, Any]:
        out = Path("/dev/shm") / f"icebergsync-bench-encode-{os.getpid()}"
        done = subprocess.run([sys.executable, "-m", "bench.support.encode", str(self.rows), str(self.files), str(self.args.days),
                               str(self.target), str(out), str(self.data_dir)], cwd=REPO, env=self.env(), capture_output=True, text=True,
                              check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        run = {"key": "encode", "engine": "encode", "source": "-", "layout": "unpartitioned", "round": round_index,
               "wall_s": result["wall_s"], "cpu_s": result["cpu_s"], "rows_per_s": result["rows"] / result["wall_s"],
               "rows_per_cpu_s": result["rows"] / result["cpu_s"], "data_files": result["files"],
               "data_bytes": result["bytes"], "load_before": load_average()[0]}
        if result.get("parse_cpu_s"):
            run["parse_encode_rows_per_cpu_s"] = result["rows"] / (result["parse_cpu_s"] + result["cpu_s"])
        print(f"[bench] round {round_index} encode: {run['rows_per_s']:,.0f} rows/s on one thread, "
              f"{run['rows_per_cpu_s']:,.0f} rows/CPU-s, {result['files']} files "
              f"{result['bytes'] / MiB:.1f} MiB", flush=True)
        return run


# -- summary ----------------------------------------------------------------------------------------

def summarize(runs: list[dict[str, Any]], cores: int) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    by_key: dict[str, list[dict[str, Any]]] = {}
    for run in ok:
        by_key.setdefault(run["key"], []).append(run)
    contenders = {}
    for key, members in by_key.items():
        contenders[key] = {
            metric: median_spread([m.get(metric) for m in members])
            for metric in ("wall_s", "process_wall_s", "rows_per_s", "cpu_s", "rows_per_cpu_s", "first_commit_s",
                           "steady_rows_per_s", "steady_rows_per_cpu_s", "steady_cpu_s", "fenced_s",
                           "data_files", "data_bytes", "commits", "broker_cpu_s", "peak_rss",
                           "parse_encode_rows_per_cpu_s")
        }
    ratios = {}
    for source in SOURCES:
        for layout in ("partitioned", "unpartitioned"):
            sink, peer = by_key.get(f"sink-{source}-{layout}"), by_key.get(f"spark-{source}-{layout}")
            if not sink or not peer:
                continue
            paired: dict[str, list[float]] = {"rows_per_s": [], "rows_per_cpu_s": [], "first_commit_s": [],
                                              "steady_rows_per_s": [], "steady_rows_per_cpu_s": []}
            peers = {r["round"]: r for r in peer}
            for run in sink:
                other = peers.get(run["round"])
                if other:
                    for metric in paired:
                        if run.get(metric) and other.get(metric):
                            paired[metric].append(run[metric] / other[metric])
            ratio = {
                "wall": _ratio(contenders, f"sink-{source}-{layout}", f"spark-{source}-{layout}", "rows_per_s"),
                "cpu": _ratio(contenders, f"sink-{source}-{layout}", f"spark-{source}-{layout}", "rows_per_cpu_s"),
                "first_commit": _ratio(contenders, f"sink-{source}-{layout}", f"spark-{source}-{layout}",
                                       "first_commit_s"),
                "steady": _ratio(contenders, f"sink-{source}-{layout}", f"spark-{source}-{layout}",
                                 "steady_rows_per_s"),
                "steady_cpu": _ratio(contenders, f"sink-{source}-{layout}", f"spark-{source}-{layout}",
                                     "steady_rows_per_cpu_s"),
                "steady_paired": median_spread(paired["steady_rows_per_s"]),
                "steady_cpu_paired": median_spread(paired["steady_rows_per_cpu_s"]),
                "wall_paired": median_spread(paired["rows_per_s"]),
                "cpu_paired": median_spread(paired["rows_per_cpu_s"]),
                "first_commit_paired": median_spread(paired["first_commit_s"]),
                "bytes": _ratio(contenders, f"sink-{source}-{layout}", f"spark-{source}-{layout}", "data_bytes"),
                "files": _ratio(contenders, f"sink-{source}-{layout}", f"spark-{source}-{layout}", "data_files"),
            }
            encode: dict[str, Any] = contenders.get("encode", {})
            sink_stats: dict[str, Any] = contenders[f"sink-{source}-{layout}"]
            # Against the encode (which has no start-up), the sink's steady state: commits 2..n.
            if encode.get("rows_per_s") and sink_stats["steady_rows_per_s"]:
                ratio["per_core_vs_encode"] = (sink_stats["steady_rows_per_s"]["median"] / cores
                                               / encode["rows_per_s"]["median"])
            if encode.get("rows_per_cpu_s") and sink_stats["steady_rows_per_cpu_s"]:
                ratio["cpu_vs_encode"] = (sink_stats["steady_rows_per_cpu_s"]["median"]
                                          / encode["rows_per_cpu_s"]["median"])
            if encode.get("parse_encode_rows_per_cpu_s") and sink_stats["steady_rows_per_cpu_s"] and source == "files":
                ratio["cpu_vs_parse_encode"] = (sink_stats["steady_rows_per_cpu_s"]["median"]
                                                / encode["parse_encode_rows_per_cpu_s"]["median"])
            ratios[f"{source}-{layout}"] = ratio
    return {"contenders": contenders, "ratios": ratios, "failed": [
        {k: r.get(k) for k in ("key", "round", "error", "log_tail")} for r in runs if "error" in r]}


def _ratio(contenders: dict[str, Any], a: str, b: str, metric: str) -> float | None:
    x, y = contenders.get(a, {}).get(metric), contenders.get(b, {}).get(metric)
    return x["median"] / y["median"] if x and y and y["median"] else None


# -- report -----------------------------------------------------------------------------------------

def _f(value: Any, spec: str = ",.0f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _ms(stat: dict[str, float] | None, spec: str = ",.0f", scale: float = 1.0) -> str:
    if not stat:
        return "-"
    if stat["n"] == 1:
        return f"{stat['median'] / scale:{spec}}"
    return f"{stat['median'] / scale:{spec}} ({stat['min'] / scale:{spec}}-{stat['max'] / scale:{spec}})"


SOURCES = ("files", "parquet", "kafka")
LABELS = {
    "sink-files": "IcebergSync, files source (`icebergsync run`)",
    "spark-files": "Spark file source → Iceberg, availableNow",
    "sink-kafka": "IcebergSync, Kafka source (`icebergsync run`)",
    "spark-kafka": "Spark Kafka source → from_json → Iceberg, availableNow",
    "sink-parquet": "IcebergSync, files source on Parquet files (`icebergsync run`)",
    "spark-parquet": "Spark file source on Parquet files → Iceberg, availableNow",
}


def render(document: dict[str, Any], out: Path) -> None:
    summary, args, m = document["summary"], document["args"], document["machine"]
    contenders, ratios = summary["contenders"], summary["ratios"]
    cores = int(args["cores"])
    loads = [r["load_before"] for r in document["runs"] if r.get("load_before") is not None]
    lines = [
        "# Benchmark results: IcebergSync against Spark's own Iceberg streaming",
        "",
        f"Generated by `{document['command']}` on {document['started']} in {document['duration_s'] / 60:.0f} min. "
        "Method and how to run it: [../benchmarks.md](../benchmarks.md).",
        "",
        "## Setup",
        "",
        f"- {m['nproc']} cores (`nproc`), {m['memory_gib']} GiB, {m['cpu']}; Python {m['python']}, {m['java']}, "
        f"PySpark {m['pyspark']}, pyarrow {m['pyarrow']}, pyiceberg {m['pyiceberg']}, {m['iceberg_spark_runtime']}.",
        f"- Every Spark contender on `local[{cores}]`; zstd; target file size {args['target_file_size']}; "
        + ("the same 15-column table" if args.get("shape", "flat") == "flat" else
           "the same table, its 15 values in 7 columns (two structs of 5 fields: `--shape nested`)")
        + " (`day(ts)` or unpartitioned); tables on tmpfs.",
        f"- Data: {document['data']['rows']:,} taxi-like rows in {document['data']['files']} JSON-lines files "
        f"({document['data']['json_bytes'] / MiB:,.0f} MiB, {document['data']['days']} days of event time); "
        + (f"the same rows in as many zstd Parquet files ({document['data']['parquet_bytes'] / MiB:,.0f} MiB); "
           if document["data"].get("parquet_bytes") else "")
        + (f"Kafka: the same lines on topic `{document['kafka']['topic']}` ({document['kafka']['partitions']} "
           "partitions, local KRaft broker). " if document.get("kafka") else "")
        + f"{args['triggers']} triggers per run for everyone ({document['files_per_trigger']} files / "
        f"{document['records_per_trigger']:,} records per trigger).",
        f"- {args['rounds']} round(s), contenders interleaved; figures are medians with (min-max) over the rounds.",
        f"- Load average (1 min) at run starts: min {min(loads, default=0):.1f}, median "
        f"{statistics.median(loads) if loads else 0:.1f}, max {max(loads, default=0):.1f} on {m['nproc']} cores "
        f"(before the benchmark {m['load_before'][0]:.1f})"
        + (" — **the machine was shared** (load above its cores): wall-clock figures are noisy, "
           "rows per CPU-second is the steadier figure." if max(loads, default=0) > cores else "."),
        "",
        "## Ratios: IcebergSync ÷ Spark (above 1: the sink is better)",
        "",
        "End to end: process start to the last commit (start-up included). Steady: commits 2..n, from the first "
        "commit to the last (start-up and the first trigger excluded). Encode columns: the sink's steady rate "
        "against the one-thread pyarrow encode of the same rows into the same files; the last column against "
        "parsing the JSON files with pyarrow plus that encode (JSON files only: the two steps the sink cannot "
        "skip). Source `files` is the JSON-lines files, `parquet` the same rows as Parquet files.",
        "",
        "| source | layout | rows/s end to end | rows/CPU-s end to end | rows/s steady | rows/CPU-s steady "
        "| time to first commit (peer ÷ sink) | bytes on disk | files | sink rows/s per core ÷ encode rows/s "
        "| sink ÷ encode, rows/CPU-s | sink ÷ (parse + encode), rows/CPU-s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, ratio in ratios.items():
        source, layout = name.split("-")

        def paired(metric: str, r: dict[str, Any] = ratio) -> str:
            stat = r.get(f"{metric}_paired")
            return f" (rounds {stat['min']:.2f}-{stat['max']:.2f})" if stat and stat["n"] > 1 else ""

        first = ratio.get("first_commit")
        lines.append(
            f"| {source} | {layout} | **{_f(ratio['wall'], '.2f')}x**{paired('wall')} "
            f"| **{_f(ratio['cpu'], '.2f')}x**{paired('cpu')} | {_f(ratio.get('steady'), '.2f')}x{paired('steady')} "
            f"| {_f(ratio.get('steady_cpu'), '.2f')}x{paired('steady_cpu')} | {_f(1 / first if first else None, '.2f')}x "
            f"| {_f(ratio['bytes'], '.2f')}x | {_f(ratio['files'], '.2f')}x "
            f"| {_f(100 * ratio['per_core_vs_encode'] if ratio.get('per_core_vs_encode') else None, '.1f', '%')} "
            f"| {_f(100 * ratio['cpu_vs_encode'] if ratio.get('cpu_vs_encode') else None, '.1f', '%')} "
            f"| {_f(100 * ratio['cpu_vs_parse_encode'] if ratio.get('cpu_vs_parse_encode') else None, '.1f', '%')} |")
    lines += ["", "## Targets", "", "| target | measured | met? |", "|---|---|---|"]
    lines += targets(ratios)
    lines += [
        "",
        "## Every contender",
        "",
        "Wall = process start → the last data commit (the snapshot's timestamp); process = start → exit. "
        "CPU = the whole process tree (driver, JVM, Python workers), start-up and shut-down included. "
        "Broker CPU (Kafka runs) is the broker's, not counted in rows per CPU-second.",
        "",
        "| contender | layout | rows/s | wall s | process s | CPU s | rows per CPU-s | first commit s "
        "| steady rows/s | steady rows/CPU-s | commits | data files | data MiB | broker CPU s | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    order = [f"{e}-{s}-{lay}" for s in SOURCES for lay in ("partitioned", "unpartitioned") for e in ENGINES]
    for key in [*order, "encode"]:
        c = contenders.get(key)
        if not c:
            continue
        engine, source, layout = [*key.split("-"), "", ""][:3] if key != "encode" else ("encode", "", "-")
        label = LABELS.get(f"{engine}-{source}", "pyarrow → zstd Parquet, 1 thread (ceiling per core)")
        lines.append(
            f"| {label} | {layout} | {_ms(c['rows_per_s'])} | {_ms(c['wall_s'], '.1f')} "
            f"| {_ms(c['process_wall_s'], '.1f')} | {_ms(c['cpu_s'], '.1f')} | {_ms(c['rows_per_cpu_s'])} "
            f"| {_ms(c['first_commit_s'], '.1f')} | {_ms(c['steady_rows_per_s'])} | {_ms(c['steady_rows_per_cpu_s'])} "
            f"| {_ms(c['commits'], '.0f')} | {_ms(c['data_files'], '.0f')} "
            f"| {_ms(c['data_bytes'], '.1f', MiB)} | {_ms(c['broker_cpu_s'], '.1f')} | {_ms(c['peak_rss'], ',.0f', MiB)} |")
    startup = []
    for key in order:
        c = contenders.get(key)
        if c and c.get("first_commit_s"):
            fenced = c.get("fenced_s")
            first = c["first_commit_s"]["median"]
            startup.append(f"- {key}: first data commit after {first:.1f} s"
                           + (f" (fenced after {fenced['median']:.1f} s, so the first trigger took "
                              f"{first - fenced['median']:.1f} s)" if fenced else ""))
    if startup:
        lines += ["", "## Start-up (medians)", "", *startup]
    lines += ["", "## Runs", "",
              "| round | contender | load before | rows/s | wall s | CPU s | first commit s | steady rows/s "
              "| steady rows/CPU-s | files | checked |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for run in document["runs"]:
        if "error" in run:
            lines.append(f"| {run['round']} | {run['key']} | {run.get('load_before', 0):.1f} | FAILED: "
                         f"{run['error'][:200]} | | | | | | | |")
            continue
        checked = ("count + checksum" if run.get("verified") else "count") if run["key"] != "encode" else "-"
        lines.append(f"| {run['round']} | {run['key']} | {run.get('load_before', 0):.1f} | {run['rows_per_s']:,.0f} "
                     f"| {run['wall_s']:.1f} | {run['cpu_s']:.1f} | {_f(run.get('first_commit_s'), '.1f')} "
                     f"| {_f(run.get('steady_rows_per_s'))} | {_f(run.get('steady_rows_per_cpu_s'))} "
                     f"| {run['data_files']} | {checked} |")
    if (out / "throughput.png").exists():
        lines += ["", "![rows per second and per CPU-second](throughput.png)"]
    (out / "results.md").write_text("\n".join(lines) + "\n")


def targets(ratios: dict[str, Any]) -> list[str]:
    """One line per target (``checks`` below), from the ratios (sink ÷ spark)."""
    checks = [
        ("≥ 1.5x the peer's rows/s (wall)", "wall", lambda v: v >= 1.5, "{:.2f}x"),
        ("≥ 1.5x the peer's rows per CPU-second", "cpu", lambda v: v >= 1.5, "{:.2f}x"),
        ("≥ 1.5x the peer's steady rows/s (commits 2..n)", "steady", lambda v: v >= 1.5, "{:.2f}x"),
        ("≥ 50% of the raw encode rate per core (sink steady rows/s ÷ cores vs one encode thread)",
         "per_core_vs_encode", lambda v: v >= 0.5, "{:.1%}"),
        ("≥ 50% of the raw encode rate per core (sink steady rows per CPU-second vs encode's)", "cpu_vs_encode",
         lambda v: v >= 0.5,
         "{:.1%}"),
        ("time to first commit no slower than the peer's", "first_commit", lambda v: v <= 1.0, None),
        ("bytes on disk within 5% of Spark's", "bytes", lambda v: v <= 1.05, "{:.2f}x"),
        ("no more files than Spark's", "files", lambda v: v <= 1.0, "{:.2f}x"),
    ]
    lines = []
    for title, metric, ok, spec in checks:
        parts, verdicts = [], []
        for name, ratio in ratios.items():
            value = ratio.get(metric)
            if value is None:
                continue
            shown = f"{value:.2f}x the peer's time" if spec is None else spec.format(value)
            parts.append(f"{name}: {shown}")
            verdicts.append(ok(value))
        if parts:
            met = "yes" if all(verdicts) else ("no" if not any(verdicts) else "partly")
            lines.append(f"| {title} | {'; '.join(parts)} | {met} |")
    return lines


def chart(document: dict[str, Any], out: Path) -> bool:
    if bench_deps().is_dir() and str(bench_deps()) not in sys.path:
        sys.path.append(str(bench_deps()))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    contenders = document["summary"]["contenders"]
    keys = [k for k in (f"{e}-{s}-{lay}" for s in SOURCES for lay in ("partitioned", "unpartitioned")
                        for e in ENGINES) if k in contenders]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    panels = ((axes[0][0], "rows_per_s", "rows/s, end to end"), (axes[0][1], "rows_per_cpu_s", "rows per CPU-s, end to end"),
              (axes[1][0], "steady_rows_per_s", "rows/s, steady (commits 2..n)"),
              (axes[1][1], "steady_rows_per_cpu_s", "rows per CPU-s, steady (commits 2..n)"))
    for axis, metric, title in panels:
        shown = [k for k in keys if contenders[k].get(metric)]
        stats = [contenders[k][metric] for k in shown]
        axis.bar(range(len(shown)), [v["median"] / 1000 for v in stats],
                 yerr=[[(v["median"] - v["min"]) / 1000 for v in stats], [(v["max"] - v["median"]) / 1000 for v in stats]],
                 color=["#1f77b4" if k.startswith("sink") else "#ff7f0e" for k in shown])
        axis.set_xticks(range(len(shown)), [k.replace("-", "\n", 1) for k in shown], fontsize=7)
        axis.set_title(f"{title} (thousands; blue: IcebergSync, orange: Spark)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    return True


# -- main -------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="3M", help="rows in the source (default 3M; --quick: 300k)")
    parser.add_argument("--files", type=int, default=30, help="JSON-lines files the rows are split into")
    parser.add_argument("--days", type=int, default=10, help="days of event time the rows span (day partitions)")
    parser.add_argument("--triggers", type=int, default=3,
                        help="triggers per run: files per trigger = files/triggers, records per trigger = rows/triggers")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (every contender once per round, interleaved)")
    parser.add_argument("--quick", action="store_true", help="300k rows, 1 round: checks that the harness works")
    parser.add_argument("--sources", default="files,parquet,kafka", help="files (JSON), parquet, kafka: any of them")
    parser.add_argument("--shape", choices=SHAPES, default="flat",
                        help="flat rows, or nested: the trip's and the fare's fields in structs (JSON sources only)")
    parser.add_argument("--layouts", default="partitioned,unpartitioned")
    parser.add_argument("--engines", default="sink,spark", help="sink, spark or both")
    parser.add_argument("--no-encode", action="store_true", help="skip the raw pyarrow encode (the ceiling)")
    parser.add_argument("--target-file-size", default="8Mi", help="target data file size for every contender")
    parser.add_argument("--kafka-partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2, help="local[N] for every Spark contender")
    parser.add_argument("--no-verify", action="store_true", help="skip reading every table back (count only)")
    parser.add_argument("--workdir", type=Path, default=Path("/dev/shm/icebergsync-peers"),
                        help="data, Kafka log, tables (tmpfs keeps the disk out of the figures)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where results.md and results.json go")
    parser.add_argument("--run-timeout", type=float, default=1800, help="seconds one contender run may take")
    parser.add_argument("--render", action="store_true", help="only re-render results.md (and chart) from results.json")
    args = parser.parse_args(argv)
    if args.render:
        document = json.loads((args.out / "results.json").read_text())
        document["summary"] = summarize(document["runs"], int(document["args"]["cores"]))
        chart(document, args.out)
        render(document, args.out)
        return 0
    if args.quick:
        if args.rows == parser.get_default("rows"):
            args.rows = "300k"
        if args.rounds == parser.get_default("rounds"):
            args.rounds = 1
    args.rows = parse_count(args.rows)
    if args.shape != "flat":  # the JSON sources only; the pyarrow ceiling is measured on the flat rows
        args.sources = ",".join(source for source in args.sources.split(",") if source != "parquet")
        args.no_encode = True
    command = " ".join(["python -m bench.run", *(argv if argv is not None else sys.argv[1:])])
    args.workdir.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    bench = Bench(args)
    bench.logs.mkdir(parents=True, exist_ok=True)
    started = time.time()
    description = machine()
    description["load_before"] = load_average()
    print(f"[bench] load {description['load_before'][0]:.1f}; preparing {args.rows:,} rows in {args.files} files",
          flush=True)
    data = bench.prepare_data()
    truth = {"rows": data["rows"], "checksum": data["checksum"]}
    sources = [s for s in args.sources.split(",") if s]
    keys = [f"{engine}-{source}-{layout}" for source in sources for layout in args.layouts.split(",") if layout
            for engine in args.engines.split(",") if engine]
    kafka = None
    runs: list[dict[str, Any]] = []
    try:
        if "kafka" in sources:
            kafka = bench.start_kafka()
            print(f"[bench] kafka: {kafka}", flush=True)
        for round_index in range(args.rounds):
            for key in run_order(keys, round_index):
                runs.append(bench.run_one(key, round_index, truth))
            if not args.no_encode:
                runs.append(bench.encode(round_index))
    finally:
        bench.stop_kafka()
    document = {
        "command": command, "machine": description, "data": data, "kafka": kafka,
        "args": {k: str(v) for k, v in vars(args).items()},
        "files_per_trigger": bench.files_per_trigger, "records_per_trigger": bench.records_per_trigger,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "duration_s": time.time() - started, "load_after": load_average(), "runs": runs,
        "summary": summarize(runs, args.cores),
    }
    (args.out / "results.json").write_text(json.dumps(document, indent=1, default=str))
    chart(document, args.out)
    render(document, args.out)
    print_summary(document)
    print(f"[bench] wrote {args.out}/results.md and results.json in {time.time() - started:.0f}s", flush=True)
    return 0 if not document["summary"]["failed"] else 1


def print_summary(document: dict[str, Any]) -> None:
    summary = document["summary"]
    for name, ratio in summary["ratios"].items():
        first = ratio.get("first_commit")
        print(f"[bench] RATIO sink/spark {name}: rows/s {_f(ratio['wall'], '.2f')}x, rows per CPU-s "
              f"{_f(ratio['cpu'], '.2f')}x, steady rows/s {_f(ratio.get('steady'), '.2f')}x, steady rows per CPU-s "
              f"{_f(ratio.get('steady_cpu'), '.2f')}x, first commit {_f(1 / first if first else None, '.2f')}x faster, "
              f"bytes {_f(ratio['bytes'], '.2f')}x, files {_f(ratio['files'], '.2f')}x, sink per core vs encode "
              f"{_f(100 * ratio['per_core_vs_encode'] if ratio.get('per_core_vs_encode') else None, '.1f', '%')} "
              f"(per CPU-s {_f(100 * ratio['cpu_vs_encode'] if ratio.get('cpu_vs_encode') else None, '.1f', '%')})",
              flush=True)
    for failed in summary["failed"]:
        print(f"[bench] FAILED {failed['key']} round {failed['round']}: {failed['error']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
