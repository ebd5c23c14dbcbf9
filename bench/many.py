"""One sync of many tables against single-table syncs, on a real Kafka broker.

    .venv/bin/python -m bench.many [--many-seconds 360] [--single-seconds 180] [--idle-seconds 150]

A KRaft broker (tests/infra/services.py ``start_kafka``, as ``bench.run`` starts it) holds 200 topics of
one partition, named by their part of a skewed load:

* ``bench.hotNN`` (5): ``--hot-rate`` records a second each, every tick: most of the changes;
* ``bench.warmNN`` (45): now and then (on average every ``--warm-every`` seconds) a batch of ``--warm-batch``;
* ``bench.rareNN`` (50): one record on average every ``--rare-every`` seconds;
* ``bench.idleNN`` (100): nothing at all.

One producer thread (confluent-kafka, the client the job reads with) produces that load at a steady pace
from the start to the end of the run, a seeded schedule of 0.5 s ticks, and stamps each record with the time
it was produced (``produced_at``, also the sync's ``eventTimeColumn``); its delivery reports give each
record's offset, so a commit's frontier says exactly which records it made visible and when.

Three syncs run in turn, each as the product runs (``icebergsync run SPEC --master local[2]``: SQLite
catalog, local warehouse, ``commit.interval: 5s``, every default, upkeep included) under bench/support/measure.py
(the whole process tree: Python driver, JVM, Python workers):

1. **many**: ``topicPattern: 'bench\\.(\\w+)'`` + ``table.name: 'lake.{1}'``: one table per topic, from the
   first offset, for ``--many-seconds``;
2. **single, hot**: ``topic: bench.hot00`` → ``lake.hot00``, from the latest offset, ``--single-seconds``;
3. **single, idle**: ``topic: bench.idle00`` → ``lake.idle00``, ``--idle-seconds``.

Steady window: from ``--warmup`` seconds after a sync's first data commit (the idle sync: after
``--idle-skip`` seconds) to its stop. In it: CPU seconds of the tree per committed row and per minute; RSS
(median of one sample a second, and the peak of the whole run); data commits per minute, per table and in
all; freshness of every record committed in it: the time its commit's log line appeared minus the
record's ``produced_at`` (p50/p95 per table, then across tables, and over all records). 200 single-table
syncs do not fit on 2 cores, so their cost is the measured single syncs multiplied: memory 200 x the idle
sync's RSS, CPU 200 x the idle sync's CPU a minute plus the rows at the hot sync's marginal CPU per row
(its CPU a minute less the idle sync's, over its rows a minute). After the many-table run every table is
checked: it exists iff its topic had a record before the sync's last commit, its rows are exactly the
offsets below its committed frontier, once. Writes docs/benchmarks/many-tables.md (+ many-tables.json).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.support.common import REPO, load_average, machine, publish, sync_document
from bench.support.measure import cpu_at

OUTPUT = REPO / "docs" / "benchmarks" / "many-tables.md"
MiB = 1024 * 1024
TICK = 0.5
SCHEMA = [
    {"name": "id", "type": "long", "required": True},
    {"name": "produced_at", "type": "timestamptz"},
    {"name": "kind", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "note", "type": "string"},
]


# -- the load ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Load:
    """The skewed load: how many topics of each kind and how often each gets records."""

    hot: int = 5
    warm: int = 45
    rare: int = 50
    idle: int = 100
    hot_rate: float = 80.0  # records a second per hot topic
    warm_every: float = 30.0  # seconds between a warm topic's batches, on average
    warm_batch: int = 60
    rare_every: float = 120.0  # seconds between a rare topic's records, on average

    def topics(self) -> dict[str, str]:
        """Every topic name with its kind, in a stable order."""
        return {f"bench.{kind}{index:02d}": kind
                for kind, count in (("hot", self.hot), ("warm", self.warm), ("rare", self.rare), ("idle", self.idle))
                for index in range(count)}

    def expected_rate(self) -> dict[str, float]:
        """Records a second of each kind of topic, all topics of the kind together."""
        return {"hot": self.hot * self.hot_rate, "warm": self.warm * self.warm_batch / self.warm_every,
                "rare": self.rare / self.rare_every, "idle": 0.0}


def tick_plan(load: Load, rng: random.Random, tick: float, carry: dict[str, float]) -> dict[str, int]:
    """The records each topic gets in one tick of ``tick`` seconds: hot topics their rate (fractions carried to
    the next tick in ``carry``), warm and rare topics a batch with probability ``tick / every``."""
    plan: dict[str, int] = {}
    for topic, kind in load.topics().items():
        if kind == "hot":
            due = carry.get(topic, 0.0) + load.hot_rate * tick
            plan[topic] = int(due)
            carry[topic] = due - int(due)
        elif kind == "warm" and rng.random() < tick / load.warm_every:
            plan[topic] = load.warm_batch
        elif kind == "rare" and rng.random() < tick / load.rare_every:
            plan[topic] = 1
    return {topic: count for topic, count in plan.items() if count}


class Producer(threading.Thread):
    """Produces ``load`` tick after tick until stopped; records every delivered record's (topic, offset) → stamp."""

    def __init__(self, bootstrap: str, load: Load, seed: int = 24):
        super().__init__(daemon=True, name="bench-producer")
        from confluent_kafka import Producer as KafkaProducer

        self.load = load
        self.rng = random.Random(seed)
        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                                       "enable.idempotence": True})
        self.stamps: dict[str, dict[int, float]] = {topic: {} for topic in load.topics()}
        self.sent: Counter[str] = Counter()
        self.errors: list[str] = []
        self.behind_s = 0.0  # the most the producer fell behind its schedule
        self.stop = threading.Event()
        self.started_at = 0.0
        self._ids: Counter[str] = Counter()

    def _delivered(self, error: Any, message: Any, stamp: float) -> None:
        if error is not None:
            self.errors.append(str(error))
        else:
            self.stamps[message.topic()][message.offset()] = stamp

    def _callback(self, stamp: float) -> Any:
        return lambda error, message: self._delivered(error, message, stamp)

    def run(self) -> None:
        carry: dict[str, float] = {}
        kinds = self.load.topics()
        self.started_at = time.time()
        start = time.monotonic()
        ticks = 0
        while not self.stop.is_set():
            for topic, count in tick_plan(self.load, self.rng, TICK, carry).items():
                kind = kinds[topic]
                for _ in range(count):
                    stamp = time.time()
                    value = record(self._ids[topic], stamp, kind)
                    self._ids[topic] += 1
                    while True:
                        try:
                            self.producer.produce(topic, value, on_delivery=self._callback(stamp))
                            break
                        except BufferError:
                            self.producer.poll(0.05)
                    self.sent[topic] += 1
            self.producer.poll(0)
            ticks += 1
            self.behind_s = max(self.behind_s, time.monotonic() - (start + ticks * TICK))
            self.stop.wait(max(0.0, start + ticks * TICK - time.monotonic()))
        self.producer.flush(30)

    def delivered(self) -> dict[str, int]:
        return {topic: len(stamps) for topic, stamps in self.stamps.items()}


def record(index: int, stamp: float, kind: str) -> bytes:
    """One record: its per-topic id, when it was produced (ms, UTC, as Spark's JSON timestamps), a few columns."""
    produced = datetime.fromtimestamp(stamp, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return json.dumps({"id": index, "produced_at": produced, "kind": kind, "amount": round(index * 0.37 % 1000, 2),
                       "note": f"{kind} change {index}"}, separators=(",", ":")).encode()


# -- figures from a measured run (pure) ------------------------------------------------------

def quantile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (nearest rank), None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def freshness(commit_lines: list[dict[str, Any]], start_epoch: float, stamps: dict[str, dict[int, float]],
              starts: dict[str, int] | None, window: tuple[float, float]) -> dict[str, list[float]]:
    """Seconds from produce to commit of every record committed in ``window`` (seconds after start), by topic.

    A commit's records are the offsets between the previous frontier of its topic (``starts`` for the first
    commit: where the sync began; without it the first commit of each topic is skipped) and its own frontier;
    its time is when its log line appeared.
    """
    previous: dict[str, int] = dict(starts or {})
    out: dict[str, list[float]] = {}
    for line in sorted(commit_lines, key=lambda c: c["t"]):
        for topic, partitions in (line.get("frontier") or {}).items():
            end = int(partitions.get("0", 0))
            begin = previous.get(topic)
            previous[topic] = end
            if begin is None or not window[0] <= line["t"] <= window[1]:
                continue
            committed_at = start_epoch + line["t"]
            times = stamps.get(topic, {})
            out.setdefault(topic, []).extend(committed_at - times[offset] for offset in range(begin, end)
                                             if offset in times)
    return out


def triggers(commit_lines: list[dict[str, Any]], gap: float = 0.5) -> list[dict[str, Any]]:
    """The commit lines grouped into triggers: a trigger's tables are logged one after the other right after its
    cut, so lines less than ``gap`` seconds apart are one trigger (its time is its first line's)."""
    out: list[dict[str, Any]] = []
    last = None
    for line in sorted(commit_lines, key=lambda c: c["t"]):
        if last is None or line["t"] - last > gap:
            out.append({"t": line["t"], "tables": 0, "records": 0})
        out[-1]["tables"] += 1
        out[-1]["records"] += line["records"]
        last = line["t"]
    return out


LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
COMMIT_MS = re.compile(r" commit sink=\S+ .*\bcommit_ms=(\d+)")
UPKEEP_LINE = " icebergsync.maintenance maintenance sink="


def cycle_breakdown(lines: list[str], interval: float, skip: int = 3) -> dict[str, Any] | None:
    """Where a trigger's wall time goes, from a job's log: per trigger (the first ``skip`` left out, start-up)
    the tables it committed, its cut's ``commit_ms``, the upkeep runs logged after it and how long they took,
    and the time to stage the next trigger: from when it was due (``interval`` after the cut, or when upkeep
    ended if later) to the start of its cut. Medians, and the staging time per table committed."""
    cycles: list[dict[str, Any]] = []
    for line in lines:
        stamp = LOG_TIME.match(line)
        if not stamp:
            continue
        at = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        commit = COMMIT_MS.search(line)
        if commit:
            if cycles and at - cycles[-1]["t"] < 0.5:
                cycles[-1]["tables"] += 1
            else:
                cycles.append({"t": at, "cut_s": int(commit.group(1)) / 1000, "tables": 1, "upkeep_end": at, "upkeep": 0})
        elif UPKEEP_LINE in line and cycles:
            cycles[-1]["upkeep_end"] = at
            cycles[-1]["upkeep"] += 1
    rows = [{"tables": b["tables"], "cut_s": b["cut_s"], "upkeep_runs": a["upkeep"], "upkeep_s": a["upkeep_end"] - a["t"],
             "stage_s": (b["t"] - b["cut_s"]) - max(a["t"] + interval, a["upkeep_end"]), "period_s": b["t"] - a["t"]}
            for a, b in itertools.pairwise(cycles)][skip:]
    if not rows:
        return None
    out: dict[str, Any] = {name: statistics.median(r[name] for r in rows) for name in rows[0]}
    out["stage_s_per_table"] = statistics.median(r["stage_s"] / r["tables"] for r in rows)
    out["triggers"] = len(rows)
    return out


def steady_window(commit_lines: list[dict[str, Any]], stopped_at: float, warmup: float, skip: float) -> tuple[float, float]:
    """From ``warmup`` seconds after the first data commit (``skip`` seconds after start when none) to the stop."""
    data = [c["t"] for c in commit_lines if c["records"] > 0]
    begin = data[0] + warmup if data else skip
    return begin, max(begin, stopped_at)


def window_figures(measured: dict[str, Any], window: tuple[float, float]) -> dict[str, Any]:
    """CPU, RSS, rows and commits of a measured run in ``window``."""
    begin, end = window
    minutes = max(1e-9, (end - begin) / 60)
    cpu = (cpu_at(measured["cpu_timeline"], end) or 0.0) - (cpu_at(measured["cpu_timeline"], begin) or 0.0)
    rss = [r for t, r in measured["rss_timeline"] if begin <= t <= end]
    inside = [c for c in measured["commit_lines"] if begin < c["t"] <= end]
    rows = sum(c["records"] for c in inside)
    per_table = Counter(c.get("table") for c in inside)
    cycle = [t for t in triggers(measured["commit_lines"]) if begin < t["t"] <= end]
    periods = [b["t"] - a["t"] for a, b in itertools.pairwise(cycle)]
    return {
        "window_s": round(end - begin, 1), "cpu_s": round(cpu, 2), "cpu_per_min": cpu / minutes,
        "rows": rows, "rows_per_min": rows / minutes, "cpu_ms_per_row": 1000 * cpu / rows if rows else None,
        "rss_median": statistics.median(rss) if rss else None, "rss_max_window": max(rss) if rss else None,
        "peak_rss": measured["peak_rss"], "commits": len(inside), "commits_per_min": len(inside) / minutes,
        "tables_committed": len(per_table), "triggers": len(cycle),
        "trigger_period_median": statistics.median(periods) if periods else None,
        "trigger_period_max": max(periods) if periods else None,
        "tables_per_trigger_median": statistics.median(t["tables"] for t in cycle) if cycle else None,
        "commits_per_min_by_table": {table: n / minutes for table, n in per_table.items()},
    }


def fresh_summary(by_topic: dict[str, list[float]], kinds: dict[str, str]) -> dict[str, Any]:
    """Freshness p50/p95 per topic, then across topics (per kind and in all), and over all records."""
    per_topic: dict[str, dict[str, float]] = {
        topic: {"n": len(v), "p50": quantile(v, 0.5) or 0.0, "p95": quantile(v, 0.95) or 0.0, "max": max(v)}
        for topic, v in by_topic.items() if v}
    out: dict[str, Any] = {"per_topic": per_topic}
    for kind in [*sorted(set(kinds.values())), "all"]:
        topics = [t for t in per_topic if kind == "all" or kinds.get(t) == kind]
        if not topics:
            continue
        records = [x for t in topics for x in by_topic[t]]
        out[kind] = {"topics": len(topics), "records": len(records),
                     "records_p50": quantile(records, 0.5), "records_p95": quantile(records, 0.95),
                     "topic_p50_median": quantile([per_topic[t]["p50"] for t in topics], 0.5),
                     "topic_p95_median": quantile([per_topic[t]["p95"] for t in topics], 0.5),
                     "topic_p95_p95": quantile([per_topic[t]["p95"] for t in topics], 0.95)}
    return out


def multiplied(idle: dict[str, Any], hot: dict[str, Any], rows_per_min: float, syncs: int = 200) -> dict[str, Any]:
    """200 single-table syncs, measured and multiplied: memory ``syncs`` x the idle sync's RSS; CPU a minute
    ``syncs`` x the idle sync's plus ``rows_per_min`` at the hot sync's marginal CPU per row."""
    marginal = (hot["cpu_per_min"] - idle["cpu_per_min"]) / hot["rows_per_min"] if hot["rows_per_min"] else 0.0
    cpu_per_min = syncs * idle["cpu_per_min"] + rows_per_min * max(0.0, marginal)
    return {"syncs": syncs, "rss": syncs * idle["rss_median"], "idle_cpu_per_min": syncs * idle["cpu_per_min"],
            "marginal_cpu_ms_per_row": 1000 * marginal, "cpu_per_min": cpu_per_min,
            "cpu_ms_per_row": 1000 * cpu_per_min / rows_per_min if rows_per_min else None}


# -- running ---------------------------------------------------------------------------------

@dataclass
class Run:
    name: str
    directory: Path
    measured: dict[str, Any] = field(default_factory=dict)
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)


def spec_of(directory: Path, bootstrap: str, table: str, source: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": {"kafka": {"bootstrapServers": bootstrap, **source}},
        "schema": SCHEMA,
        "eventTimeColumn": "produced_at",
        "table": {"catalog": {"type": "sql", "uri": f"sqlite:///{directory}/catalog.db", "warehouse": str(directory / "wh")},
                  "name": table},
        "commit": {"interval": "5s"},
    }


def run_sync(name: str, workdir: Path, spec: dict[str, Any], seconds: float, timeout: float) -> Run:
    """``icebergsync run`` of ``spec`` under bench.support.measure, stopped (SIGTERM) after ``seconds``."""
    directory = workdir / name
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    path = directory / "spec.json"
    path.write_text(json.dumps(sync_document(f"many-{name}", spec), indent=1))
    run = Run(name, directory, load_before=load_average())
    result, log = directory / "measure.json", directory / "job.log"
    command = [sys.executable, "-m", "bench.support.measure", str(result), str(log), "--stop-after-seconds", str(seconds),
               "--timeout", str(timeout), "--",
               str(Path(sys.executable).parent / "icebergsync"), "run", str(path), "--master", "local[2]"]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYSPARK_PYTHON": sys.executable}
    print(f"[many] {name}: {seconds:.0f} s, log {log}", flush=True)
    subprocess.run(command, cwd=REPO, env=env, check=False)
    run.load_after = load_average()
    run.measured = json.loads(result.read_text())
    return run


def log_problems(log: Path, limit: int = 12) -> dict[str, Any]:
    """WARNING/ERROR lines of a job's log: how many, and the first distinct ones (timestamps cut)."""
    lines = [line.rstrip() for line in log.read_text(errors="replace").splitlines()
             if " WARNING " in line or " ERROR " in line or "Traceback" in line or " WARN " in line]
    distinct: list[str] = []
    for line in lines:
        text = line.split(" ", 2)[-1][:300]
        if text not in distinct:
            distinct.append(text)
    return {"count": len(lines), "first": distinct[:limit]}


def check_tables(directory: Path, producer: Producer, commit_lines: list[dict[str, Any]],
                 start_epoch: float) -> dict[str, Any]:
    """Every table of the many-table run against its topic: exists iff its topic had a record delivered
    before the sync's last trigger but one was planned (two trigger periods before the last commit), rows
    exactly its committed offsets, once."""
    from pyiceberg.catalog.sql import SqlCatalog

    from icebergsync import protocol
    from icebergsync.spec import qualified_sink_id

    catalog = SqlCatalog("icebergsync", uri=f"sqlite:///{directory}/catalog.db", warehouse=(directory / "wh").as_uri())
    present = {".".join(ident) for ident in catalog.list_tables("lake")} if catalog.list_namespaces() else set()
    cycle = triggers(commit_lines)
    last_commit = start_epoch + (cycle[-1]["t"] if cycle else 0.0)
    margin = 2 * max((b["t"] - a["t"] for a, b in itertools.pairwise(cycle)), default=10.0) + 5
    problems: list[str] = []
    checked = 0
    for topic in producer.load.topics():
        table = "lake." + topic.split(".", 1)[1]
        early = [o for o, stamp in producer.stamps[topic].items() if stamp < last_commit - margin]
        if table not in present:
            if early:
                problems.append(f"{table} missing: {topic} had {len(early)} record(s) delivered {margin:.0f} s "
                                "before the last commit")
            continue
        loaded = catalog.load_table(table)
        progress = protocol.read_progress(loaded.metadata, qualified_sink_id("bench", "many-many", None))
        frontier = (progress.frontier or {}).get(topic, {}).get("0", 0) if progress else 0
        ids = loaded.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
        checked += 1
        if sorted(ids) != list(range(frontier)):
            problems.append(f"{table}: {len(ids)} rows ({len(set(ids))} distinct), committed frontier {frontier}")
        if not producer.stamps[topic]:
            problems.append(f"{table} exists but {topic} never had a record")
    return {"tables": len(present), "checked": checked, "problems": problems, "margin_s": round(margin, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--many-seconds", type=float, default=360)
    parser.add_argument("--single-seconds", type=float, default=180)
    parser.add_argument("--idle-seconds", type=float, default=150)
    parser.add_argument("--warmup", type=float, default=30, help="seconds after the first data commit the window starts")
    parser.add_argument("--idle-skip", type=float, default=60, help="the idle sync's window starts this late")
    parser.add_argument("--hot-rate", type=float, default=Load.hot_rate)
    parser.add_argument("--warm-every", type=float, default=Load.warm_every)
    parser.add_argument("--warm-batch", type=int, default=Load.warm_batch)
    parser.add_argument("--rare-every", type=float, default=Load.rare_every)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--render", action="store_true", help="re-render the page from its .json")
    args = parser.parse_args(argv)
    if args.render:
        publish(render(json.loads(args.output.with_suffix(".json").read_text())), args.output)
        return 0
    from tests.infra.services import start_kafka, stop_kafka

    started = time.monotonic()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-many-"))
    load = Load(hot_rate=args.hot_rate, warm_every=args.warm_every, warm_batch=args.warm_batch, rare_every=args.rare_every)
    load_at_start = load_average()
    broker = start_kafka(workdir / "kafka")
    try:
        for topic in load.topics():
            broker.create_topic(topic, 1)
        print(f"[many] {len(load.topics())} topics on {broker.bootstrap_servers} in {time.monotonic() - started:.0f} s",
              flush=True)
        producer = Producer(broker.bootstrap_servers, load)
        producer.start()
        timeout = max(args.many_seconds, args.single_seconds, args.idle_seconds) + 600
        many = run_sync("many", workdir, spec_of(workdir / "many", broker.bootstrap_servers, "lake.{1}",
                                                 {"topicPattern": r"bench\.(\w+)"}), args.many_seconds, timeout)
        hot = run_sync("hot", workdir, spec_of(workdir / "hot", broker.bootstrap_servers, "lake.hot00",
                                               {"topic": "bench.hot00", "startingOffsets": "latest"}),
                       args.single_seconds, timeout)
        idle = run_sync("idle", workdir, spec_of(workdir / "idle", broker.bootstrap_servers, "lake.idle00",
                                                 {"topic": "bench.idle00", "startingOffsets": "latest"}),
                        args.idle_seconds, timeout)
        producer.stop.set()
        producer.join(60)
        results = summarize(args, load, producer, many, hot, idle)
        results["load_at_start"] = load_at_start
        results["total_minutes"] = round((time.monotonic() - started) / 60, 1)
    finally:
        stop_kafka(broker)
    (args.output.with_suffix(".json")).write_text(json.dumps(results, indent=1, default=str))
    publish(render(results), args.output)
    return 0 if not results["check"]["problems"] and all(r["exit"] == 0 for r in results["runs"].values()) else 1


def summarize(args: argparse.Namespace, load: Load, producer: Producer, many: Run, hot: Run, idle: Run) -> dict[str, Any]:
    kinds = load.topics()
    runs: dict[str, Any] = {}
    for run, skip in ((many, 0.0), (hot, 0.0), (idle, args.idle_skip)):
        measured = run.measured
        window = steady_window(measured["commit_lines"], measured["stopped_at_s"] or measured["process_wall_s"],
                               args.warmup, skip)
        starts = {topic: 0 for topic in kinds} if run is many else None
        by_topic = freshness(measured["commit_lines"], measured["start_epoch"], producer.stamps, starts, window)
        runs[run.name] = {
            "exit": measured["exit"], "timed_out": measured["timed_out"], "wall_s": measured["process_wall_s"],
            "cpu_total_s": measured["cpu_s"], "window": window, **window_figures(measured, window),
            "freshness": fresh_summary(by_topic, kinds), "load_before": run.load_before, "load_after": run.load_after,
            "log": log_problems(run.directory / "job.log"),
            "cycle": cycle_breakdown((run.directory / "job.log").read_text(errors="replace").splitlines(), 5.0),
            "first_commit_s": next(
                (c["t"] for c in measured["commit_lines"] if c["records"] > 0), None),
        }
    many_figures = runs["many"]
    by_kind: dict[str, dict[str, float]] = {}
    for table, per_min in many_figures["commits_per_min_by_table"].items():
        kind = kinds.get("bench." + str(table).split(".", 1)[-1], "?")
        by_kind.setdefault(kind, {"tables": 0, "commits_per_min": 0.0})
        by_kind[kind]["tables"] += 1
        by_kind[kind]["commits_per_min"] += per_min
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(), "load": load.__dict__,
        "expected_rate": load.expected_rate(), "sent": dict(producer.sent), "producer_errors": producer.errors[:5],
        "producer_behind_s": round(producer.behind_s, 2), "runs": runs, "commits_by_kind": by_kind,
        "multiplied": multiplied(runs["idle"], runs["hot"], many_figures["rows_per_min"]),
        "check": check_tables(many.directory, producer, many.measured["commit_lines"], many.measured["start_epoch"]),
        "args": vars(args),
    }


# -- the page --------------------------------------------------------------------------------

def _s(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f} s"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MiB:,.0f} MiB"


def _load(values: Any) -> str:
    return " ".join(f"{v:.1f}" for v in values)


def render(results: dict[str, Any]) -> str:
    runs, load, multi = results["runs"], results["load"], results["multiplied"]
    many, hot, idle = runs["many"], runs["hot"], runs["idle"]
    rate = results["expected_rate"]
    total_rate = sum(rate.values())
    lines = [
        "# Many tables in one sync: 200 Kafka topics, one sync, against single-table syncs",
        "",
        f"Generated by `python -m bench.many` (bench/many.py) on {results['date']}, "
        f"{results['total_minutes']} min in all. Command: `.venv/bin/python -m bench.many "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in results["args"].items()
                   if k not in ("workdir", "output", "render")) + "` (the defaults); the method is in its docstring.",
        "",
        "## Setup",
        "",
        f"- A local KRaft broker (the suite's `start_kafka`), 200 topics of one partition: {load['hot']} hot "
        f"(`bench.hotNN`, {load['hot_rate']:.0f} records/s each), {load['warm']} warm (a batch of {load['warm_batch']} "
        f"on average every {load['warm_every']:.0f} s), {load['rare']} rare (one record on average every "
        f"{load['rare_every']:.0f} s), {load['idle']} idle (none). Expected {total_rate:,.0f} records/s, "
        f"{100 * rate['hot'] / total_rate:.0f}% on the hot topics; produced at that pace by one thread "
        f"(confluent-kafka, acks=all) for the whole run (it fell at most {results['producer_behind_s']} s behind "
        "its schedule), each record stamped with its produce time.",
        "- Every sync: `icebergsync run SPEC --master local[2]`, SQLite catalog, local warehouse, "
        "`commit.interval: 5s`, every other setting default (upkeep on), measured by bench/support/measure.py "
        "(the whole process tree: Python driver, JVM, Python workers).",
        "- **many**: `topicPattern: 'bench\\.(\\w+)'`, `table.name: 'lake.{1}'`, from the earliest offset. "
        "**single hot**: `topic: bench.hot00` → `lake.hot00`; **single idle**: `topic: bench.idle00` → `lake.idle00` "
        "(both from the latest offset). Run one after the other while the producer kept the same load on "
        "all 200 topics.",
        f"- Steady window: from {results['args']['warmup']:.0f} s after a sync's first data commit (idle: after "
        f"{results['args']['idle_skip']:.0f} s) to its stop. Freshness: commit log line time minus the record's produce time, "
        "for every record committed in the window.",
        f"- Machine: {results['machine']['nproc']} cores, {results['machine']['memory_gib']} GiB, "
        f"{results['machine']['cpu']}; shared with other jobs. **Load average (1/5/15 min)** at the start "
        f"{_load(results['load_at_start'])}; many: {_load(many['load_before'])} → {_load(many['load_after'])}; single hot: "
        f"{_load(hot['load_before'])} → {_load(hot['load_after'])}; single idle: {_load(idle['load_before'])} → "
        f"{_load(idle['load_after'])}. CPU seconds are the steadier figures; wall-clock ones (freshness) move with the load.",
        "",
        "## Figures",
        "",
        "| | one sync of 200 topics (many) | single sync, hot topic | single sync, idle topic "
        "| 200 single syncs (**measured and multiplied**) |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| steady window | {many['window_s']:.0f} s | {hot['window_s']:.0f} s | {idle['window_s']:.0f} s | - |",
        f"| RSS, steady (median) | {_mib(many['rss_median'])} | {_mib(hot['rss_median'])} | {_mib(idle['rss_median'])} "
        f"| {_mib(multi['rss'])} (200 x idle) |",
        f"| RSS, peak of the run | {_mib(many['peak_rss'])} | {_mib(hot['peak_rss'])} | {_mib(idle['peak_rss'])} | - |",
        f"| rows committed a minute | {many['rows_per_min']:,.0f} | {hot['rows_per_min']:,.0f} | {idle['rows_per_min']:,.0f} "
        f"| {many['rows_per_min']:,.0f} (the same load) |",
        f"| CPU seconds a minute | {many['cpu_per_min']:.1f} | {hot['cpu_per_min']:.1f} | {idle['cpu_per_min']:.2f} "
        f"| {multi['cpu_per_min']:.1f} (200 x {idle['cpu_per_min']:.2f} idle + rows x "
        f"{multi['marginal_cpu_ms_per_row']:.2f} ms) |",
        f"| CPU per changed row | {_ms(many['cpu_ms_per_row'])} | {_ms(hot['cpu_ms_per_row'])} | - "
        f"| {_ms(multi['cpu_ms_per_row'])} |",
        f"| data commits a minute (all tables) | {many['commits_per_min']:.1f} over {many['tables_committed']} tables "
        f"| {hot['commits_per_min']:.1f} | {idle['commits_per_min']:.1f} | - |",
        f"| triggers (cuts) in the window; tables per trigger, median | {many['triggers']}; "
        f"{many['tables_per_trigger_median'] or 0:.0f} | {hot['triggers']}; 1 | 0 | - |",
        f"| time between triggers, median (max) | {_s(many['trigger_period_median'])} ({_s(many['trigger_period_max'])}) "
        f"| {_s(hot['trigger_period_median'])} ({_s(hot['trigger_period_max'])}) | - | - |",
    ]
    for kind in ("hot", "warm", "rare"):
        fm, fh = many["freshness"].get(kind), hot["freshness"].get(kind)
        if fm:
            lines.append(
                f"| freshness, {kind} tables: records p50 / p95 (tables' p95 median) | "
                f"{_s(fm['records_p50'])} / {_s(fm['records_p95'])} ({_s(fm['topic_p95_median'])}, {fm['topics']} tables) "
                f"| {(_s(fh['records_p50']) + ' / ' + _s(fh['records_p95'])) if fh else '-'} | - | - |")
    fa = many["freshness"].get("all")
    if fa:
        lines.append(f"| freshness, all tables: p50 / p95 of the tables' p50, p95 of the tables' p95 | "
                     f"{_s(fa['topic_p50_median'])} / {_s(fa['topic_p95_p95'])} | - | - | - |")
    if multi["rss"] and many["rss_median"] and many["cpu_per_min"]:
        fh = hot["freshness"].get("hot") or {}
        fm = many["freshness"].get("hot") or {}
        lines += ["", f"Ratios: 200 single syncs (measured and multiplied) ÷ one sync of 200 topics: memory "
                  f"**{multi['rss'] / many['rss_median']:.0f}x**, CPU a minute **{multi['cpu_per_min'] / many['cpu_per_min']:.1f}x**. "
                  "Freshness of a hot table, the many-table sync ÷ a single sync of that topic: p50 "
                  + (f"**{fm['records_p50'] / fh['records_p50']:.1f}x**" if fm and fh else "-") + "."]
    cycles = [(name, runs[name].get("cycle")) for name in ("many", "hot") if runs[name].get("cycle")]
    if cycles:
        lines += ["", "Where a trigger's wall time goes (from the job's log, medians over its triggers after the first "
                  "three): `commit.interval` counts from the end of the previous cut; staging runs from when the trigger "
                  "is due (or upkeep ended) to the start of its cut (listing offsets, planning, claiming new tables, the "
                  "Spark job of each touched table, merging small files).", "",
                  "| sync | triggers | tables per trigger | staging | staging per table | cut (`commit_ms`) "
                  "| upkeep runs after a trigger | upkeep time | time between triggers |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, c in cycles:
            assert c is not None
            lines.append(f"| {name} | {c['triggers']} | {c['tables']:.0f} | {_s(c['stage_s'], 2)} | {_s(c['stage_s_per_table'], 2)} "
                         f"| {_s(c['cut_s'], 2)} | {c['upkeep_runs']:.0f} | {_s(c['upkeep_s'], 2)} | {_s(c['period_s'], 2)} |")
    lines += ["", "Data commits a minute in the many-table sync, by kind of topic (in the steady window):", "",
              "| kind | tables committed | commits a minute, all its tables | per table |", "| --- | ---: | ---: | ---: |"]
    for kind in ("hot", "warm", "rare", "idle"):
        entry = results["commits_by_kind"].get(kind)
        if entry:
            lines.append(f"| {kind} | {entry['tables']} | {entry['commits_per_min']:.1f} "
                         f"| {entry['commits_per_min'] / entry['tables']:.2f} |")
        else:
            lines.append(f"| {kind} | 0 | 0 | 0 |")
    check = results["check"]
    lines += ["", "## Checks", "",
              f"- Tables after the many-table run: {check['tables']} (topics that had records by the end of all three "
              f"runs: {sum(1 for n in results['sent'].values() if n)} of 200); {check['checked']} read back. A topic "
              f"with a record delivered {check.get('margin_s', '?')} s (twice the longest trigger period, plus 5 s) before the sync's "
              "last commit must have its table.",
              "- Problems: " + ("; ".join(check["problems"]) if check["problems"] else
                                "none (each table exists iff its topic had records, and holds exactly the offsets "
                                "below its committed frontier, once)."),
              f"- Exit statuses: many {many['exit']}, hot {hot['exit']}, idle {idle['exit']}; producer errors: "
              f"{results['producer_errors'] or 'none'}.",
              "- WARNING/ERROR lines in the jobs' logs: " + ", ".join(
                  f"{name} {run['log']['count']}" for name, run in runs.items()) + ".", ""]
    for name, run in runs.items():
        if run["log"]["first"]:
            lines += [f"First distinct ones ({name}):", "", "```", *run["log"]["first"], "```", ""]
    lines += ["Machine: " + ", ".join(f"{k} {v}" for k, v in results["machine"].items()), ""]
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


if __name__ == "__main__":
    raise SystemExit(main())
