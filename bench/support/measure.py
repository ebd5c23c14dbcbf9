"""Run one contender's command and measure its whole process tree.

    python -m bench.support.measure RESULT.json LOG [--stop-after-records N] [--timeout S] -- COMMAND ...

* CPU seconds of the whole tree (the Python driver, the JVM, the Python workers, whatever they
  start), counted two ways, the larger wins: every process's own CPU (utime + stime from /proc,
  sampled every 0.25 s and kept after it exits: misses at most a process's last 0.25 s), and
  ``getrusage(RUSAGE_CHILDREN)`` once the tree is gone (this process is a child subreaper, so
  orphans are re-parented here and reaped). The second alone is not enough: PySpark's worker
  daemon does not reap its workers, and the workers' CPU (most of the sink's) never reached it.
* Wall time from just before the command starts to its exit, and the epoch of the start (the
  caller compares it with the table's snapshot timestamps for time-to-first/last-commit).
* Peak RSS of the tree (sum over its processes at one instant, sampled from /proc every 0.25 s).
* ``--stop-after-records N``: for a command that does not end by itself (``icebergsync run`` on a
  files or Kafka source keeps polling), its ``commit … records=K`` log lines are summed and the
  command gets SIGTERM (the sink's clean stop: finish the trigger, stop Spark) once N are committed.
  ``--stop-after-seconds S``: SIGTERM S seconds after the start (a sync with nothing to commit).
* Each commit line's time, records, table and frontier (``commit_lines``); the tree's RSS over time
  (``rss_timeline``, one sample a second) next to its cumulative CPU (``cpu_timeline``).
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
COMMIT_LINE = re.compile(r"\bcommit sink=\S+ version=\d+ table=\S+ snapshot=\d+ records=(\d+)")
COMMIT_DETAIL = re.compile(r"\btable=(\S+) .*\bfrontier=(\{.*\})\s*$")
FENCE_LINE = re.compile(r" fenced \S+; resuming it from ")
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_at(timeline: list[list[float]], t: float) -> float | None:
    """The tree's cumulative CPU seconds at ``t`` seconds after start, interpolated between samples."""
    if not timeline or t < timeline[0][0]:
        return None
    for (t0, c0), (t1, c1) in itertools.pairwise(timeline):
        if t0 <= t <= t1:
            return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
    return timeline[-1][1] if t <= timeline[-1][0] + 1.0 else None


def descendants(root: int) -> set[int]:
    """Live processes under ``root`` (inclusive), from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    raw = handle.read().decode(errors="replace")
            except OSError:
                continue
            parents[int(entry)] = int(raw[raw.rfind(")") + 2:].split()[1])
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(child for child, parent in parents.items() if parent == pid and child not in tree)
    return tree


def rss(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as handle:
                total += int(handle.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


def own_cpu(pids: set[int], seen: dict[tuple[int, int], float]) -> None:
    """Record each live process's own CPU seconds (utime + stime) in ``seen``, keyed by (pid, start time)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                raw = handle.read().decode(errors="replace")
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2:].split()
        seen[(pid, int(fields[19]))] = (int(fields[11]) + int(fields[12])) / TICKS


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.support.measure", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", type=Path)
    parser.add_argument("log", type=Path)
    parser.add_argument("--stop-after-records", type=int, default=0)
    parser.add_argument("--stop-after-seconds", type=float, default=0)
    parser.add_argument("--timeout", type=float, default=1800)
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        parser.error("the command follows --")
    args = parser.parse_args(argv[:argv.index("--")])
    command = argv[argv.index("--") + 1:]
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")

    seen: dict[tuple[int, int], float] = {}
    state: dict[str, Any] = {"records": 0, "stopped_at": None, "commit_lines": [], "peak_rss": 0,
                             "cpu_timeline": [], "rss_timeline": [], "fenced_at": None}
    cpu_before = children_cpu()
    start_epoch = time.time()
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def pump() -> None:
        assert process.stdout is not None
        with args.log.open("wb") as log:
            for raw in process.stdout:
                log.write(raw)
                log.flush()
                text = raw.decode(errors="replace")
                if state["fenced_at"] is None and FENCE_LINE.search(text):
                    state["fenced_at"] = time.monotonic() - started
                match = COMMIT_LINE.search(text)
                if match:
                    state["records"] += int(match.group(1))
                    state["commit_lines"].append({"t": time.monotonic() - started, "records": int(match.group(1)),
                                                  **commit_detail(text)})
                    if args.stop_after_records and state["records"] >= args.stop_after_records \
                            and state["stopped_at"] is None:
                        state["stopped_at"] = time.monotonic() - started
                        process.send_signal(signal.SIGTERM)

    def sample() -> None:
        # The tree's cumulative CPU over time (every process's own CPU, exited ones at their last
        # sample), so a caller can take the CPU between two commits (steady state).
        samples = 0
        while process.poll() is None:
            pids = descendants(os.getpid()) - {os.getpid()}  # the command's tree and orphans re-parented here
            tree_rss = rss(pids)
            state["peak_rss"] = max(state["peak_rss"], tree_rss)
            own_cpu(pids, seen)
            elapsed = round(time.monotonic() - started, 3)
            state["cpu_timeline"].append((elapsed, round(sum(seen.values()), 3)))
            if samples % 4 == 0:
                state["rss_timeline"].append((elapsed, tree_rss))
            samples += 1
            if args.stop_after_seconds and elapsed >= args.stop_after_seconds and state["stopped_at"] is None:
                state["stopped_at"] = elapsed
                process.send_signal(signal.SIGTERM)
            time.sleep(0.25)

    reader = threading.Thread(target=pump, daemon=True)
    sampler = threading.Thread(target=sample, daemon=True)
    reader.start()
    sampler.start()
    timed_out = False
    try:
        status = process.wait(args.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        for pid in descendants(process.pid):
            with _quiet():
                os.kill(pid, signal.SIGKILL)
        status = process.wait()
    exited = time.monotonic() - started
    reader.join(10)
    # Reap re-parented descendants (a JVM or Python worker whose parent went first); give them a
    # short grace, then kill what is left of the tree so the CPU figure is complete and nothing leaks.
    deadline = time.monotonic() + 20
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            if time.monotonic() > deadline:
                for orphan in descendants(os.getpid()) - {os.getpid()}:
                    with _quiet():
                        os.kill(orphan, signal.SIGKILL)
                deadline = time.monotonic() + 60
            time.sleep(0.05)
    result = {
        "command": command, "exit": status, "timed_out": timed_out, "start_epoch": start_epoch,
        "process_wall_s": exited, "cpu_s": round(max(children_cpu() - cpu_before, sum(seen.values())), 3),
        "cpu_reaped_s": round(children_cpu() - cpu_before, 3), "cpu_sampled_s": round(sum(seen.values()), 3),
        "peak_rss": state["peak_rss"], "records_logged": state["records"], "stopped_at_s": state["stopped_at"],
        "commit_lines": state["commit_lines"], "cpu_timeline": state["cpu_timeline"], "fenced_s": state["fenced_at"],
        "rss_timeline": state["rss_timeline"],
    }
    args.result.write_text(json.dumps(result, indent=1))
    return 0


def commit_detail(line: str) -> dict[str, Any]:
    """The table and frontier of a ``commit … table=T … frontier={…}`` log line ({} when absent)."""
    match = COMMIT_DETAIL.search(line)
    if not match:
        return {}
    try:
        frontier = json.loads(match.group(2))
    except ValueError:
        frontier = None
    return {"table": match.group(1), "frontier": frontier}


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], ProcessLookupError)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
