"""Full-scan timing of the keyed benchmarks: every column of every live row, deletes applied."""

from __future__ import annotations

import statistics
import time
from typing import Any


def scan_seconds(frame_of: Any, repeat: int = 3) -> float:
    """Median wall time of a full scan (every column of every live row, deletes applied)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        frame = frame_of()
        frame.selectExpr("count(*)", f"sum(hash({', '.join(f'`{c}`' for c in frame.columns)}))").collect()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def scans_in_turn(frames: dict[str, Any], rounds: int = 5) -> dict[str, float]:
    """Each frame's median full-scan time, the frames read one after the other, round after round: every table
    is read in the same state of the JVM (whose code warms up) and of the machine's load, which move a scan of
    a tenth of a second by as much as itself."""
    times: dict[str, list[float]] = {name: [] for name in frames}
    for _ in range(rounds):
        for name, frame_of in frames.items():
            times[name].append(scan_seconds(frame_of, 1))
    return {name: statistics.median(taken) for name, taken in times.items()}
