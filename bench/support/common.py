"""Shared pieces of the benchmark: process-tree sampling, file-size accounting, data cache, machine facts."""

from __future__ import annotations

import glob
import os
import platform
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_app.job.loop import RunSummary

REPO = Path(__file__).resolve().parents[2]
CORES = 2  # local[2]: every Spark contender gets the same two cores
GENERATOR_BYTES_PER_ROW = 26  # spark_app.sources.generator.ESTIMATED_BYTES_PER_ROW
PAGE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MiB = 1024 * 1024


# -- process tree: RSS and CPU -----------------------------------------------------------------

def _stat(pid: int) -> tuple[int, str, float, int] | None:
    """(ppid, comm, cpu seconds incl. reaped children, rss bytes) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode(errors="replace")
    except OSError:
        return None
    close = raw.rfind(")")
    comm = raw[raw.find("(") + 1:close]
    fields = raw[close + 2:].split()
    # fields[0] is state (stat field 3): utime=14, stime=15, cutime=16, cstime=17, rss=24 → index - 3
    ppid = int(fields[1])
    cpu = sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLOCK_TICKS
    rss = int(fields[21]) * PAGE
    return ppid, comm, cpu, rss


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def process_tree(root: int) -> dict[int, tuple[int, str, float, int]]:
    """Every live process under ``root`` (inclusive) with its stat fields."""
    stats: dict[int, tuple[int, str, float, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                stats[int(entry)] = stat
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, *_rest) in stats.items():
        children[ppid].append(pid)
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            tree[pid] = stats[pid]
            todo.extend(children.get(pid, []))
    return tree


def classify(root: int, pid: int, comm: str, cache: dict[tuple[int, str], str]) -> str:
    """driver (this Python process), jvm (Spark driver+executor in local mode), or pyworker."""
    if pid == root:
        return "driver"
    key = (pid, comm)  # spark-submit's shell script execs java under the same pid: key on comm too
    if key not in cache:
        program = _cmdline(pid).split(" ")[0]
        if comm == "java" or program.endswith("/java"):
            cache[key] = "jvm"
        elif "python" in comm or "python" in program:
            cache[key] = "pyworker"
        else:
            cache[key] = "other"
    return cache[key]


@dataclass
class Peak:
    """Peak RSS per process class over a sampling window, and CPU seconds the tree used in it."""

    driver: int = 0
    jvm: int = 0
    pyworkers: int = 0  # sum over the Python worker processes (daemon + forked workers) at the same instant
    pyworker_max: int = 0  # the largest single Python worker
    total: int = 0
    cpu_seconds: float = 0.0
    samples: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"driver": self.driver, "jvm": self.jvm, "pyworkers": self.pyworkers,
                "pyworker_max": self.pyworker_max, "total": self.total, "cpu_seconds": round(self.cpu_seconds, 2),
                "samples": self.samples}


class TreeSampler:
    """Samples /proc for this process's tree every ``interval`` seconds in a background thread.

    ``window()`` starts a measurement window; ``close_window()`` returns its Peak (RSS maxima and
    CPU seconds consumed by the processes alive at either end of the window).
    """

    def __init__(self, interval: float = 0.1):
        self.root = os.getpid()
        self.interval = interval
        self._kinds: dict[tuple[int, str], str] = {}
        self._lock = threading.Lock()
        self._peak = Peak()
        self._cpu_start: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="bench-sampler")
        self._thread.start()

    def _sample(self) -> dict[int, tuple[int, str, float, int]]:
        tree = process_tree(self.root)
        sums: dict[str, int] = defaultdict(int)
        worker_max = 0
        for pid, (_ppid, comm, _cpu, rss) in tree.items():
            kind = classify(self.root, pid, comm, self._kinds)
            sums[kind] += rss
            if kind == "pyworker":
                worker_max = max(worker_max, rss)
        with self._lock:
            peak = self._peak
            peak.driver = max(peak.driver, sums["driver"])
            peak.jvm = max(peak.jvm, sums["jvm"])
            peak.pyworkers = max(peak.pyworkers, sums["pyworker"])
            peak.pyworker_max = max(peak.pyworker_max, worker_max)
            peak.total = max(peak.total, sum(sums.values()))
            peak.samples += 1
        return tree

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _cpu(self, tree: dict[int, tuple[int, str, float, int]]) -> dict[int, float]:
        return {pid: cpu for pid, (_p, _c, cpu, _r) in tree.items()}

    def window(self) -> None:
        with self._lock:
            self._peak = Peak()
        self._cpu_start = self._cpu(self._sample())

    def close_window(self) -> Peak:
        end = self._cpu(self._sample())
        with self._lock:
            peak, self._peak = self._peak, Peak()
        peak.cpu_seconds = sum(cpu - self._cpu_start.get(pid, 0.0) for pid, cpu in end.items())
        return peak

    def worker_pids(self) -> list[int]:
        """Python worker processes under the JVM (for py-spy)."""
        tree = process_tree(self.root)
        return [pid for pid, (_p, comm, _c, _r) in tree.items() if classify(self.root, pid, comm, self._kinds) == "pyworker"]

    def stop(self) -> None:
        self._stop.set()


# -- files against the target size -------------------------------------------------------------

_OURS = re.compile(r"-(\d{5})-(\d+)-(\d{5})-[0-9a-f]{12}\.parquet$")  # …-<partition>-<attempt>-<seq>-<uuid>
_SPARK = re.compile(r"^(\d{5})-(\d+)-.*-(\d{5})\.parquet$")  # <partition>-<task>-<operation>-<seq>


def writer_of(path: str) -> tuple[str, int] | None:
    """(writer id, file sequence) parsed from a data file's name, for our sink and Spark's writer."""
    name = path.rsplit("/", 1)[-1]
    match = _OURS.search(name)
    if match:
        return f"ours-{match.group(1)}-{match.group(2)}", int(match.group(3))
    match = _SPARK.match(name)
    if match:
        return f"spark-{match.group(1)}-{match.group(2)}", int(match.group(3))
    return None


def file_report(files: list[dict[str, Any]], target: int) -> dict[str, Any]:
    """Files (dicts with snapshot, partition, path, size) judged against the target size.

    A "tail" is the last file a writer (one task, one partition) closed in a commit: it holds what
    was left and may be small. Every other file should be within ±10% of the target. When a file
    name does not say which writer made it (pyiceberg), the smallest file of each (commit,
    partition) is taken as the tail.
    """
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for f in files:
        writer = writer_of(f["path"])
        key = (f["snapshot"], f["partition"], writer[0] if writer else None)
        groups[key].append({**f, "seq": writer[1] if writer else None})
    tails, bodies = [], []
    for group in groups.values():
        if group[0]["seq"] is not None:
            group.sort(key=lambda f: f["seq"])
        else:
            group.sort(key=lambda f: -f["size"])
        bodies.extend(group[:-1])
        tails.append(group[-1])
    sizes = sorted(f["size"] for f in files)
    within = [f for f in bodies if abs(f["size"] - target) <= 0.1 * target]
    over = [f for f in files if f["size"] > 1.1 * target]

    def q(values: list[int], p: float) -> int:
        return values[min(len(values) - 1, int(p * (len(values) - 1) + 0.5))] if values else 0

    return {
        "files": len(files), "tails": len(tails), "non_tail": len(bodies), "non_tail_within_10pct": len(within),
        "over_110pct": len(over), "min": q(sizes, 0), "p50": q(sizes, 0.5), "max": q(sizes, 1.0),
        "non_tail_min": min((f["size"] for f in bodies), default=0),
        "non_tail_max": max((f["size"] for f in bodies), default=0),
        "bytes": sum(sizes), "target": target,
        "meets": (len(within) == len(bodies)) and not over,
    }


# -- the data cache (naive floor and pyarrow ceiling read the same rows) ------------------------

def data_dir(workdir: Path) -> Path:
    return workdir / "data"


def arrow_schema() -> pa.Schema:
    """The Arrow schema (with Iceberg field ids) that our sink writes for the generator columns."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from icebergsync.schema import iceberg_schema
    from icebergsync.spec import GENERATOR_COLUMNS

    return schema_to_pyarrow(iceberg_schema(list(GENERATOR_COLUMNS)), include_field_ids=True)


def load_data(workdir: Path, rows: int) -> pa.Table:
    """The first ``rows`` generator rows as one Arrow table (memory-mapped from the cache)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    parts = sorted(glob.glob(str(data_dir(workdir) / "part-*.arrow")))
    batches, have = [], 0
    for part in parts:
        if have >= rows:
            break
        table = ipc.open_file(pa.memory_map(part)).read_all()
        for batch in table.to_batches():
            if have >= rows:
                break
            take = batch.slice(0, rows - have)
            batches.append(take)
            have += take.num_rows
    if have < rows:
        raise RuntimeError(f"the data cache has {have} rows, {rows} needed")
    return pa.Table.from_batches(batches)


def cached_rows(workdir: Path) -> int:
    marker = data_dir(workdir) / "ROWS"
    return int(marker.read_text()) if marker.exists() else 0


# -- machine --------------------------------------------------------------------------------------

def _first(command: list[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30)
        return (out.stdout + out.stderr).strip().splitlines()[0]
    except Exception:
        return "?"


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def machine() -> dict[str, Any]:
    import pyarrow
    import pyiceberg
    import pyspark

    cpu = "?"
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as handle:
        mem_kib = int(next(line for line in handle if line.startswith("MemTotal")).split()[1])
    jars = glob.glob(str(iceberg_jar_dir() / "iceberg-spark-runtime-*.jar"))
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "java": _first(["java", "-version"]),
        "pyspark": pyspark.__version__,
        "pyiceberg": pyiceberg.__version__,
        "pyarrow": pyarrow.__version__,
        "iceberg_spark_runtime": Path(jars[0]).name if jars else "?",
    }


def parse_count(text: str) -> int:
    """A row count as the benchmarks' options take it: ``300k``, ``3M``, ``1,500``."""
    text = text.strip().lower().replace("_", "").replace(",", "")
    factor = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text[:-1] if text[-1] in "km" else text) * factor)


def parse_size(text: str) -> int:
    """A byte size as the spec writes it (``8Mi``), by icebergsync.units."""
    from icebergsync.units import parse_size as size

    return size(text)


def bench_deps() -> Path:
    """Where ``bench/lock.sh install`` puts the locked bench extra (matplotlib, py-spy): outside .venv,
    which the suite checks holds exactly requirements-dev.lock."""
    import hashlib

    lock = REPO / "bench" / "requirements.lock"
    cache = Path(os.environ.get("ICEBERGSYNC_CACHE") or Path.home() / ".cache" / "icebergsync")
    return cache / "bench-deps" / hashlib.sha256(lock.read_bytes()).hexdigest()[:16]


def iceberg_jar_dir() -> Path:
    cache = Path(os.environ.get("ICEBERGSYNC_CACHE", Path.home() / ".cache" / "icebergsync"))
    return cache / "jars" / "iceberg-spark"


def iceberg_runtime_jar() -> str:
    """The iceberg-spark-runtime jar (fetched by scripts/infra/services.sh spark if missing)."""
    jars = sorted(glob.glob(str(iceberg_jar_dir() / "iceberg-spark-runtime-*.jar")))
    if not jars:
        subprocess.run(["bash", str(REPO / "scripts/infra/services.sh"), "spark"], check=True)
        jars = sorted(glob.glob(str(iceberg_jar_dir() / "iceberg-spark-runtime-*.jar")))
    if not jars:
        raise RuntimeError(f"no iceberg-spark-runtime jar in {iceberg_jar_dir()}")
    return jars[0]


def now() -> float:
    return time.perf_counter()


@dataclass
class Cell:
    """One benchmark cell: a contender on one layout and size, run ``runs`` times in one process."""

    contender: str  # sink | native | naive | ceiling | ceiling2 | noop
    layout: str  # unpartitioned | partitioned
    rows: int
    rows_per_trigger: int
    runs: int
    target_file_bytes: int
    workdir: str
    variant: str = ""  # native: "none" (fan-out) | "hash"
    warmup_rows: int = 200_000
    profile: bool = False
    label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def partition_by(self) -> list[str]:
        return ["day(ts)", "bucket(16, vendor)"] if self.layout == "partitioned" else []

    def name(self) -> str:
        variant = f"-{self.variant}" if self.variant else ""
        return self.label or f"{self.contender}{variant}-{self.layout}-{self.rows}-{self.rows_per_trigger}"


def iceberg_session(app_name: str, warehouse: Path) -> Any:
    """A local Spark session with Apache Iceberg's runtime and SQL extensions, and a Hadoop catalog
    ``bench`` at ``warehouse``: the peer and reader of the benchmarks that compare tables."""
    from spark_app.job.session import build_session

    return build_session(app_name, f"local[{CORES}]", {
        "spark.driver.maxResultSize": "0", "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraClassPath": iceberg_runtime_jar(),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.catalog.bench": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.bench.type": "hadoop",
        "spark.sql.catalog.bench.warehouse": warehouse.as_uri(),
    })


def sync_document(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """An IcebergSync resource named ``name`` in namespace ``bench`` with ``spec``."""
    return {"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
            "metadata": {"name": name, "namespace": "bench"}, "spec": spec}


class SyncInThread:
    """A sync's job (spark_app.job.loop.SyncJob) run in process on a thread, as the benchmarks drive it."""

    def __init__(self, document: dict[str, Any], spark: Any):
        from icebergsync.spec import parse_spec
        from spark_app.job.loop import SyncJob

        self.sync = parse_spec(document)
        self.job = SyncJob(self.sync, 1, spark)
        self.summary: RunSummary | None = None  # the job's, once it returned (its upkeep totals among them)
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.summary = self.job.run()
        except BaseException as exc:  # raised by check()
            self._errors.append(exc)

    def start(self) -> SyncInThread:
        self._thread.start()
        return self

    def check(self) -> None:
        """Raise what the job raised, if it failed."""
        if self._errors:
            raise self._errors[0]

    def stop(self, timeout: float = 300) -> None:
        """Ask the job to stop after its trigger, wait for it and raise what it raised."""
        self.job.stop_requested.set()
        self._thread.join(timeout)
        self.check()


def committed_through(catalog: Any, table_name: str, file_name: str) -> bool:
    """Whether a commit on main of the files-source sync into ``table_name`` has ``file_name`` as its frontier."""
    from icebergsync import protocol

    try:
        table = catalog.load_table(table_name)
    except Exception:  # not created yet
        return False
    commits = (protocol.parse_commit(s) for s in protocol.main_ancestry(table.metadata))
    return any(c is not None and c.frontier == {"after": file_name} for c in commits)


def publish(text: str, output: Path) -> None:
    """Print a benchmark's page and write it to ``output``."""
    print(text)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)

