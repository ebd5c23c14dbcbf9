"""The sink's internals (generator source): docs/benchmarks/internals/results.md, results.json, throughput.png.

The peers benchmark is ``python -m bench.run``; this one decomposes where the sink's
CPU goes (generator, JVM → Arrow hand-off, writer), memory against rows per trigger, commit
latency as history grows and a py-spy profile, next to Spark's batch ``writeTo().append()``.

    .venv/bin/python -m bench.internals                       # default: 5M rows, 3 runs (~40 min on 2 cores)
    .venv/bin/python -m bench.internals --sizes 20k --runs 1 --quick   # smoke run (~3 min)
    .venv/bin/python -m bench.internals --sizes 1M,5M,20M,50M --memory-triggers 1M,5M,20M,50M   # full range

Every contender runs in its own process (one Spark session per cell, local[2]) one after the
other, on the same generator rows, the same target file size and zstd. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.support.common import REPO, Cell, cached_rows, load_average, machine, parse_count, parse_size
from bench.support.internals_report import write_report

DEFAULT_OUT = REPO / "docs" / "benchmarks" / "internals"


def auto_trigger(rows: int) -> int:
    """Rows per trigger: at least 4 commits, at most 1M rows per commit."""
    return max(1, min(1_000_000, rows // 4))


def plan(args: argparse.Namespace) -> list[Cell]:
    cells: list[Cell] = []
    target = parse_size(args.target_file_size)
    sizes = [parse_count(s) for s in args.sizes.split(",") if s]
    common = {"runs": args.runs, "target_file_bytes": target, "workdir": str(args.workdir),
              "warmup_rows": min(200_000, max(20_000, min(sizes)))}
    wanted = set(args.contenders.split(",")) if args.contenders else None

    def add(contender: str, layout: str, rows: int, per_trigger: int, **extra: Any) -> None:
        if wanted is None or contender in wanted or f"{contender}-{extra.get('variant', '')}" in wanted:
            cells.append(Cell(contender=contender, layout=layout, rows=rows, rows_per_trigger=per_trigger,
                              **{**common, **extra}))

    for rows in sizes:
        per_trigger = parse_count(args.rows_per_trigger) if args.rows_per_trigger else auto_trigger(rows)
        for layout in ("unpartitioned", "partitioned"):
            add("sink", layout, rows, per_trigger)
            add("native", layout, rows, per_trigger, variant="none")
            if layout == "partitioned" and not args.quick:
                add("native", layout, rows, per_trigger, variant="hash")
            add("naive", layout, rows, per_trigger)
            add("pyiceberg", layout, rows, per_trigger)
        add("noop", "unpartitioned", rows, per_trigger)
        add("jvm-noop", "unpartitioned", rows, per_trigger)
        add("ceiling", "unpartitioned", rows, per_trigger)
        add("ceiling2", "unpartitioned", rows, per_trigger)
    # Memory against rows per trigger: one trigger of each size, one run.
    for per_trigger in [parse_count(s) for s in args.memory_triggers.split(",") if s]:
        for layout in args.memory_layouts.split(","):
            add("sink", layout, per_trigger, per_trigger, runs=1, label=f"memory-{layout}-{per_trigger}",
                extra={"group": "memory"})
    # Commit latency as the table's history grows: many small commits.
    if args.commit_scaling:
        per_trigger = 10_000 if not args.quick else 2_000
        add("sink", "unpartitioned", per_trigger * args.commit_scaling, per_trigger, runs=1,
            label=f"commits-{args.commit_scaling}", extra={"group": "commits"})
    # py-spy profile of our sink's Python workers (a separate run, so profiling does not skew the figures).
    if args.profile:
        rows = min(max(sizes), 2_000_000)
        per_trigger = parse_count(args.rows_per_trigger) if args.rows_per_trigger else auto_trigger(rows)
        for layout in args.profile_layouts.split(","):
            add("sink", layout, rows, per_trigger, runs=1, profile=True, label=f"profile-{layout}",
                extra={"group": "profile", "profile_out": str(Path(args.workdir) / f"pyspy-{layout}.txt")})
    return cells


def run_cell(cell: Cell, workdir: Path, timeout: float) -> dict[str, Any]:
    name = cell.name()
    cell_path, result_path, log_path = (workdir / f"{name}.cell.json", workdir / f"{name}.result.json",
                                        workdir / f"{name}.log")
    cell_path.write_text(json.dumps(asdict(cell)))
    result_path.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYSPARK_PYTHON": sys.executable}
    started = time.monotonic()
    load_before = load_average()
    with log_path.open("w") as log:
        process = subprocess.Popen([sys.executable, "-m", "bench.support.worker", str(cell_path), str(result_path), str(log_path)],
                                   cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            status = process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            status = -9
    elapsed = time.monotonic() - started
    if status != 0 or not result_path.exists():
        tail = log_path.read_text(errors="replace")[-3000:]
        print(f"[bench] {name} FAILED (exit {status}) after {elapsed:.0f}s:\n{tail}", flush=True)
        return {"cell": asdict(cell), "error": f"exit {status}", "log_tail": tail[-800:]}
    result = json.loads(result_path.read_text())
    result["elapsed_s"] = elapsed
    result["load_before"], result["load_after"] = load_before, load_average()
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith("[bench]"):
            print(line, flush=True)
    print(f"[bench] {name} done in {elapsed:.0f}s (load {load_before[0]:.1f} → {result['load_after'][0]:.1f})",
          flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.internals", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="5M", help="total rows per run, e.g. 1M,5M,20M,50M")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per cell (median, min, max)")
    parser.add_argument("--rows-per-trigger", default="", help="rows per commit; default min(1M, size/4)")
    parser.add_argument("--target-file-size", default="8Mi", help="target data file size for every contender")
    parser.add_argument("--memory-triggers", default="1M,5M,20M",
                        help="rows per trigger for the memory check (one trigger each); '' to skip")
    parser.add_argument("--memory-layouts", default="partitioned", help="layouts for the memory check")
    parser.add_argument("--profile-layouts", default="partitioned", help="layouts profiled with py-spy")
    parser.add_argument("--commit-scaling", type=int, default=60, help="commits in the commit-latency run; 0 skips")
    parser.add_argument("--no-profile", dest="profile", action="store_false", help="skip the py-spy profile runs")
    parser.add_argument("--contenders", default="", help="only these (sink,native,native-hash,naive,pyiceberg,"
                                                         "noop,jvm-noop,ceiling,ceiling2)")
    parser.add_argument("--quick", action="store_true", help="smoke run: small memory/commit checks, no hash variant")
    parser.add_argument("--workdir", type=Path, default=Path("/dev/shm/icebergsync-bench"),
                        help="tables and the data cache (tmpfs keeps the disk out of the figures)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where results.md/json and the PNG go")
    parser.add_argument("--cell-timeout", type=float, default=1800)
    args = parser.parse_args(argv)
    if args.quick:
        if args.memory_triggers == parser.get_default("memory_triggers"):
            args.memory_triggers = "20k,40k"
            args.profile_layouts = "partitioned"
        if args.commit_scaling == parser.get_default("commit_scaling"):
            args.commit_scaling = 5
    args.workdir.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)

    started = time.time()
    description = machine()
    description["load_before"] = load_average()
    cells = plan(args)
    print(f"[bench] {len(cells)} cells; machine {description}", flush=True)
    needs = max((c.rows for c in cells if c.contender in ("pyiceberg", "ceiling", "ceiling2")), default=0)
    needs = max(needs, max((c.warmup_rows for c in cells), default=0))
    prepare_info: dict[str, Any] = {}
    if needs and cached_rows(args.workdir) < needs:
        prep = run_cell(Cell(contender="prepare", layout="unpartitioned", rows=needs, rows_per_trigger=needs, runs=0,
                             target_file_bytes=parse_size(args.target_file_size), workdir=str(args.workdir),
                             label="prepare"), args.workdir, args.cell_timeout)
        prepare_info = prep.get("prepare", {})
    if not prepare_info:
        from bench.support.common import load_data

        sample = load_data(args.workdir, min(cached_rows(args.workdir), 1_000_000))
        prepare_info = {"rows": cached_rows(args.workdir), "arrow_bytes_per_row": sample.nbytes / sample.num_rows}

    results = [run_cell(cell, args.workdir, args.cell_timeout) for cell in cells]
    description["load_after"] = load_average()
    document = {
        "machine": description, "arrow_bytes_per_row": prepare_info["arrow_bytes_per_row"],
        "args": {k: str(v) for k, v in vars(args).items()}, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z",
                                                                                      time.localtime(started)),
        "duration_s": time.time() - started, "results": results,
    }
    for layout in ("unpartitioned", "partitioned"):
        profile = args.workdir / f"pyspy-{layout}.txt"
        if args.profile and profile.exists():
            document[f"profile_{layout}"] = profile.read_text()
    (args.out / "results.json").write_text(json.dumps(_slim(document), indent=1, default=str))
    write_report(document, args.out)
    print(f"[bench] wrote {args.out}/results.md, results.json, throughput.png in {time.time() - started:.0f}s",
          flush=True)
    return 0 if all("error" not in r for r in results) else 1


def _slim(document: dict[str, Any]) -> dict[str, Any]:
    """results.json without the raw py-spy stacks (summarised in results.md)."""
    return {k: v for k, v in document.items() if not k.startswith("profile_")}


if __name__ == "__main__":
    sys.exit(main())
