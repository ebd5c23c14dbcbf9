"""Turn bench.internals' raw cell results into docs/benchmarks/internals/results.md and throughput.png."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
COMMIT_BUDGET_MS = 0.05 * 60_000  # 5% of a 60 s commit interval

LABELS = {
    "sink": "IcebergSync sink",
    "native-none": "Spark Iceberg writeTo().append(), distribution none + fan-out",
    "native-hash": "Spark Iceberg writeTo().append(), distribution hash",
    "naive": "naive: Spark toArrow() → pyiceberg append (driver)",
    "pyiceberg": "pyiceberg append of pre-generated Arrow (writer only)",
    "noop": "Spark generator → Arrow → Python no-op (the JVM row path, which only spec.transform takes)",
    "jvm-noop": "Spark generator → noop sink (JVM only)",
    "ceiling": "pyarrow zstd Parquet encode, 1 process (ceiling per core)",
    "ceiling2": "pyarrow zstd Parquet encode, 2 processes",
}
SHORT = {"sink": "sink", "native-none": "native none", "native-hash": "native hash", "naive": "naive",
         "pyiceberg": "pyiceberg only", "noop": "gen→py noop", "jvm-noop": "gen noop",
         "ceiling": "encode 1p", "ceiling2": "encode 2p"}
CORES = {"ceiling": 1}


def key(cell: dict[str, Any]) -> str:
    return f"{cell['contender']}-{cell['variant']}" if cell.get("variant") else cell["contender"]


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def summarize(result: dict[str, Any], arrow_bytes_per_row: float) -> dict[str, Any]:
    cell = result["cell"]
    runs = result.get("runs", [])
    if "error" in result or not runs:
        return {"key": key(cell), "cell": cell, "error": result.get("error", "no runs")}
    rates = [r["steady_rows"] / r["steady_s"] for r in runs if r.get("steady_s")]
    cpu = [r["peak"]["cpu_seconds"] for r in runs]
    commit_ms = [c["commit_ms"] for r in runs for c in r.get("commits", []) if c.get("commit_ms") is not None]
    cores = CORES.get(key(cell), 2)
    first = runs[0]
    return {
        "key": key(cell), "cell": cell, "runs": len(runs),
        "rate": statistics.median(rates), "rate_min": min(rates), "rate_max": max(rates),
        "mb_s": statistics.median(rates) * arrow_bytes_per_row / 1e6, "cores": cores,
        "per_core": statistics.median(rates) / cores,
        "rows_per_cpu_s": statistics.median(r["rows"] / c for r, c in zip(runs, cpu, strict=True) if c > 0)
        if any(c > 0 for c in cpu) else float("nan"),
        "cpu_util": statistics.median(c / r["wall_s"] for r, c in zip(runs, cpu, strict=True)),
        "commits": len(first.get("commits", [])) or None,
        "commit_p50": pct(commit_ms, 0.5) if commit_ms else None,
        "commit_p95": pct(commit_ms, 0.95) if commit_ms else None,
        "commit_ms": commit_ms,
        "commit_source": first.get("commit_ms_source"),
        "peak_driver": max(r["peak"]["driver"] for r in runs), "peak_jvm": max(r["peak"]["jvm"] for r in runs),
        "peak_pyworkers": max(r["peak"]["pyworkers"] for r in runs),
        "peak_pyworker_max": max(r["peak"]["pyworker_max"] for r in runs),
        "files": first.get("files"), "snapshots": first.get("snapshots"),
        "tasks": first.get("tasks_per_trigger"),
        "load": (result.get("load_before", [0])[0], result.get("load_after", [0])[0]),
        "wall": statistics.median(r["wall_s"] for r in runs),
    }


def fmt_rate(value: float) -> str:
    return f"{value / 1000:,.0f}k" if value < 1e6 else f"{value / 1e6:,.2f}M"


def fmt_mb(value: int) -> str:
    return f"{value / MiB:,.0f}" if value else "-"


def _files(f: dict[str, Any] | None) -> str:
    if not f:
        return "-"
    if f["non_tail"]:
        body = f"{f['non_tail_within_10pct']}/{f['non_tail']} in ±10% ({f['non_tail_min'] / MiB:.1f}-{f['non_tail_max'] / MiB:.1f})"
    else:
        body = "all tails"
    return f"{f['files']}: p50 {f['p50'] / MiB:.1f}, max {f['max'] / MiB:.1f}; {body}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def main_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| rows | rows/trigger | layout | contender | rows/s median (min-max) | MB/s | rows/s/core | rows/CPU-s "
        "| CPU used | commits | commit p50/p95 ms | peak RSS MiB driver / JVM / Py workers (largest) "
        "| files: size MiB (target ±10%) | snapshots |",
        "|---:|---:|---|---|---|---:|---:|---:|---:|---:|---|---|---|---:|",
    ]
    for r in rows:
        c = r["cell"]
        if "error" in r:
            lines.append(f"| {c['rows']:,} | {c['rows_per_trigger']:,} | {c['layout']} | {SHORT[r['key']]} | "
                         f"FAILED: {r['error']} | | | | | | | | | |")
            continue
        lines.append(
            f"| {c['rows']:,} | {c['rows_per_trigger']:,} | {c['layout']} | {SHORT[r['key']]} "
            f"| {fmt_rate(r['rate'])} ({fmt_rate(r['rate_min'])}-{fmt_rate(r['rate_max'])}) | {r['mb_s']:,.1f} "
            f"| {fmt_rate(r['per_core'])} | {fmt_rate(r['rows_per_cpu_s'])} | {r['cpu_util']:.2f} "
            f"| {r['commits'] or '-'} | {_ms(r['commit_p50'])} / {_ms(r['commit_p95'])} "
            f"| {fmt_mb(r['peak_driver'])} / {fmt_mb(r['peak_jvm'])} / {fmt_mb(r['peak_pyworkers'])} "
            f"({fmt_mb(r['peak_pyworker_max'])}) | {_files(r['files'])} | {r['snapshots'] or '-'} |")
    return lines


def find(rows: list[dict[str, Any]], k: str, size: int, layout: str) -> dict[str, Any] | None:
    for r in rows:
        c = r["cell"]
        if r["key"] == k and c["rows"] == size and (c["layout"] == layout or k.startswith(("ceiling", "noop", "jvm"))) \
                and "error" not in r:
            return r
    return None


def targets(rows: list[dict[str, Any]], memory: list[dict[str, Any]], commits: list[dict[str, Any]]) -> list[str]:
    sizes = sorted({r["cell"]["rows"] for r in rows})
    lines = ["| target | measured | met? |", "|---|---|---|"]
    ratios, encode_ratios = [], []
    for size in sizes:
        for layout in ("unpartitioned", "partitioned"):
            sink = find(rows, "sink", size, layout)
            for variant in ("native-none", "native-hash"):
                native = find(rows, variant, size, layout)
                if sink and native:
                    ratios.append((size, layout, variant, sink["rate"] / native["rate"]))
            ceiling = find(rows, "ceiling", size, layout)
            if sink and ceiling:
                encode_ratios.append((size, layout, sink["per_core"] / ceiling["per_core"]))
    text = "; ".join(f"{s / 1e6:g}M {lay[:5]}. vs {v.split('-')[1]}: {x:.2f}x" for s, lay, v, x in ratios)
    lines.append(f"| throughput ≥ 1.5x native Spark Iceberg writer | {text or 'n/a'} "
                 f"| {'yes' if ratios and all(x >= 1.5 for *_, x in ratios) else 'no'} |")
    text = "; ".join(f"{s / 1e6:g}M {lay[:5]}.: {x:.0%}" for s, lay, x in encode_ratios)
    lines.append(f"| ≥ 50% of raw pyarrow encode rate per core | end to end (incl. generator): {text or 'n/a'} "
                 f"| {'yes' if encode_ratios and all(x >= 0.5 for *_, x in encode_ratios) else 'no'} |")
    sink_commits = [ms for r in rows + commits if r["key"] == "sink" and "error" not in r for ms in r["commit_ms"]]
    p95 = pct(sink_commits, 0.95) if sink_commits else None
    longest = ""
    if commits and "error" not in commits[0]:
        ms = commits[0]["commit_ms"]
        longest = (f"; {len(ms)} commits in a row: first {ms[0]:.0f} ms, last 10 median "
                   f"{statistics.median(ms[-10:]):.0f} ms, p95 {pct(ms, 0.95):.0f} ms")
    lines.append(f"| commit time ≤ 5% of a 60 s interval (≤ {COMMIT_BUDGET_MS:.0f} ms) | sink p95 "
                 f"{_ms(p95)} ms over {len(sink_commits)} commits{longest} "
                 f"| {'yes' if p95 is not None and p95 <= COMMIT_BUDGET_MS else 'no'} |")
    flat = []
    for layout in ("unpartitioned", "partitioned"):
        points = sorted((m["cell"]["rows_per_trigger"], m["peak_pyworker_max"]) for m in memory
                        if m["cell"]["layout"] == layout and "error" not in m)
        if len(points) >= 2:
            values = [v for _, v in points]
            flat.append((layout, points, max(values) / min(values)))
    text = "<br>".join(f"{layout}: " + ", ".join(f"{n / 1e6:g}M → {v / MiB:.0f} MiB" for n, v in points)
                       + f" (max/min {ratio:.2f})" for layout, points, ratio in flat)
    lines.append(f"| peak memory flat in rows per trigger (largest Python worker; flat = max/min ≤ 1.25) "
                 f"| {text or 'n/a'} | {'yes' if flat and all(x <= 1.25 for *_, x in flat) else 'no'} |")
    sink_files = [(r["cell"]["rows"], r["cell"]["layout"], r["files"]) for r in rows + memory
                  if r["key"] == "sink" and "error" not in r and r.get("files")]
    text = "; ".join(f"{s / 1e6:g}M {lay[:5]}.: {f['non_tail_within_10pct']}/{f['non_tail']} non-tail in ±10%, "
                     f"{f['over_110pct']} over" for s, lay, f in sink_files)
    lines.append(f"| files within ±10% of target except each writer's last file of a commit | {text or 'n/a'} "
                 f"| {'yes' if sink_files and all(f['meets'] for *_, f in sink_files) else 'no'} |")
    return lines


def profile_summary(text: str, top: int = 18) -> list[str]:
    """Self and inclusive sample shares per function from py-spy's raw (collapsed) output."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [re.sub(r" \((?:[^()]*/)?([^()/]+?):\d+\)$", r" (\1)", f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    if not total:
        return ["(no samples)"]
    lines = [f"{total} on-CPU samples of the Python workers (py-spy, 97 Hz; waits for input are not sampled; per-task start-up is included).", "",
             "| function (file) | self | inclusive |", "|---|---:|---:|"]
    interesting = [f for f, _ in own.most_common(top)]
    for f in interesting:
        lines.append(f"| `{f}` | {own[f] / total:.0%} | {inclusive[f] / total:.0%} |")
    lines += ["", "Inclusive share of the writer's main steps:", "",
              "| step | inclusive |", "|---|---:|"]
    for step in ("stage_partition", "split_dead_letters", "conform", "write (writer.py)", "flush", "_write_group",
                 "_close", "data_file_statistics_from_parquet_metadata", "_enforce_memory_budget",
                 "read_batch", "load_stream", "dump_stream", "group_by", "take"):
        name, _, file = step.partition(" ")
        hits = sum(n for f, n in inclusive.items()
                   if f.split(" (")[0] == name and (not file or file.strip("()") in f))
        if hits:
            lines.append(f"| `{step}` | {hits / total:.0%} |")
    return lines


def chart(rows: list[dict[str, Any]], memory: list[dict[str, Any]], out: Path) -> None:
    import sys

    from bench.support.common import bench_deps

    if bench_deps().is_dir() and str(bench_deps()) not in sys.path:
        sys.path.append(str(bench_deps()))  # bench/lock.sh install
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["cell"]["rows"] for r in rows})
    order = ["sink", "native-none", "native-hash", "naive", "pyiceberg", "noop", "jvm-noop", "ceiling", "ceiling2"]
    colors = {"sink": "#1f77b4", "native-none": "#ff7f0e", "native-hash": "#ffbb78", "naive": "#2ca02c",
              "pyiceberg": "#98df8a", "noop": "#9467bd", "jvm-noop": "#c5b0d5", "ceiling": "#7f7f7f",
              "ceiling2": "#c7c7c7"}
    panels = [(s, layout) for s in sizes for layout in ("unpartitioned", "partitioned")]
    fig, axes = plt.subplots(1, len(panels) + (1 if memory else 0),
                             figsize=(4.2 * (len(panels) + (1 if memory else 0)), 4.6), squeeze=False)
    for ax, (size, layout) in zip(axes[0], panels, strict=False):
        names, values, low, high, cols = [], [], [], [], []
        for k in order:
            r = find(rows, k, size, layout)
            if r is None:
                continue
            names.append(SHORT[k])
            values.append(r["rate"] / 1e3)
            low.append((r["rate"] - r["rate_min"]) / 1e3)
            high.append((r["rate_max"] - r["rate"]) / 1e3)
            cols.append(colors[k])
        ax.barh(names[::-1], values[::-1], xerr=[low[::-1], high[::-1]], color=cols[::-1], capsize=3)
        ax.set_title(f"{size / 1e6:g}M rows, {layout}", fontsize=10)
        ax.set_xlabel("thousand rows/s (median, min-max)")
        ax.tick_params(axis="y", labelsize=8)
    if memory:
        ax = axes[0][-1]
        for layout, style in (("unpartitioned", "o-"), ("partitioned", "s--")):
            points = sorted((m["cell"]["rows_per_trigger"], m["peak_pyworker_max"]) for m in memory
                            if m["cell"]["layout"] == layout and "error" not in m)
            if points:
                ax.plot([p[0] / 1e6 for p in points], [p[1] / MiB for p in points], style, label=layout)
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("rows per trigger (millions, log)")
        ax.set_ylabel("peak RSS of the largest Python worker (MiB)")
        ax.set_title("sink memory vs trigger size", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle("IcebergSync sink vs alternatives — same data, local[2], same target file size, zstd", fontsize=11)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)


def write_report(document: dict[str, Any], out: Path) -> None:
    bpr = document["arrow_bytes_per_row"]
    summaries = [summarize(r, bpr) for r in document["results"]]
    main = [s for s in summaries if not s["cell"].get("extra", {}).get("group")]
    memory = [s for s in summaries if s["cell"].get("extra", {}).get("group") == "memory"]
    commits = [s for s in summaries if s["cell"].get("extra", {}).get("group") == "commits"]
    m = document["machine"]
    loads = [s["load"] for s in summaries if "load" in s]
    busiest = max((max(a, b) for a, b in loads), default=0.0)
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `{_command(document)}` on {document['started']} in "
        f"{document['duration_s'] / 60:.0f} min. How to read this: [../../benchmarks.md](../../benchmarks.md).",
        "",
        "## Machine",
        "",
        f"- {m['nproc']} cores (`nproc`), {m['memory_gib']} GiB memory, CPU: {m['cpu']}, kernel {m['kernel']}",
        f"- Python {m['python']}, {m['java']}, PySpark {m['pyspark']} (local[2]), pyiceberg {m['pyiceberg']}, "
        f"pyarrow {m['pyarrow']}, {m['iceberg_spark_runtime']}",
        f"- load average (1 min) before {m['load_before'][0]:.1f}, after {m['load_after'][0]:.1f}; "
        f"the highest seen at a cell boundary was {busiest:.1f}"
        + (" — **the machine was shared with other jobs during this run** (load above its 2 cores), so "
           "wall-clock rates are noisy and lower than on an idle machine; rows per CPU-second is the "
           "contention-robust figure." if busiest > 2.5 else "."),
        f"- data: the generator's taxi-trip rows (15 columns), {bpr:.0f} bytes/row as Arrow in memory (the MB/s "
        f"basis); target file size {document['args']['target_file_size']}, "
        "zstd, for every contender; "
        "tables on tmpfs (/dev/shm).",
        "",
        "## Targets",
        "",
        *targets(main, memory, commits),
        "",
        "## All contenders",
        "",
        "Throughput is the steady state: rows of commits 2..n over the time from the end of commit 1 to the end "
        "of commit n (encode contenders: the whole run). Each cell ran in its own process after a warm-up.",
        "",
        *main_table(main),
        "",
    ]
    for k in ("sink", "native-none", "native-hash", "naive", "pyiceberg", "noop", "jvm-noop", "ceiling", "ceiling2"):
        lines.append(f"- **{SHORT[k]}**: {LABELS[k]}")
    lines.append("")
    sources = sorted({(s["key"], s["commit_source"]) for s in main if s.get("commit_source")})
    if sources:
        lines += ["Commit latency sources: " + "; ".join(f"{SHORT[k]}: {v}" for k, v in sources) + ".", ""]
    if memory:
        lines += ["## Memory against rows per trigger (sink, one trigger each)", "", *main_table(memory), ""]
    if commits:
        c = commits[0]
        if "error" not in c:
            ms = c["commit_ms"]
            lines += ["## Commit latency as the table's history grows (sink, unpartitioned)", "",
                      f"{len(ms)} commits of {c['cell']['rows_per_trigger']:,} rows: commit_ms p50 {pct(ms, 0.5):.0f}, "
                      f"p95 {pct(ms, 0.95):.0f}, max {max(ms):.0f}; first five {', '.join(f'{v:.0f}' for v in ms[:5])}; "
                      f"last five {', '.join(f'{v:.0f}' for v in ms[-5:])}.", ""]
    for layout in ("unpartitioned", "partitioned"):
        text = document.get(f"profile_{layout}")
        if text:
            lines += [f"## py-spy profile of the sink's Python workers ({layout})", "", *profile_summary(text), ""]
    lines += ["![throughput](throughput.png)", ""]
    (out / "results.md").write_text("\n".join(lines))
    chart(main, memory, out)


def _command(document: dict[str, Any]) -> str:
    a = document["args"]
    parts = [".venv/bin/python -m bench.internals", f"--sizes {a['sizes']}", f"--runs {a['runs']}"]
    if a.get("quick") == "True":
        parts.append("--quick")
    return " ".join(parts)
