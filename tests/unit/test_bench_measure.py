"""bench.support.measure counts the CPU of every process of the tree, also of those no parent reaps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.support.common import REPO

# The parent ignores SIGCHLD, as PySpark's worker daemon does with its workers: the kernel reaps the
# child and its CPU time reaches no parent's rusage (getrusage(RUSAGE_CHILDREN) never sees it).
UNREAPED_CHILD = """
import os, signal, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
child = os.fork()
if child == 0:
    started = time.process_time()
    while time.process_time() - started < 1.0:
        pass
    os._exit(0)
# Outlive the child, however long a loaded machine makes its second of CPU take: an orphan would be
# reaped by bench.support.measure (a subreaper), and counted by its rusage after all.
while True:
    try:
        os.kill(child, 0)
    except ProcessLookupError:
        break
    time.sleep(0.05)
"""


def test_cpu_of_a_child_nobody_reaps_is_counted(tmp_path: Path) -> None:
    result = tmp_path / "measure.json"
    subprocess.run([sys.executable, "-m", "bench.support.measure", str(result), str(tmp_path / "log"), "--",
                    sys.executable, "-c", UNREAPED_CHILD], cwd=REPO, check=True, timeout=60)
    measured = json.loads(result.read_text())
    assert measured["exit"] == 0
    assert measured["cpu_reaped_s"] < 0.5  # what the rusage of reaped children alone says
    assert measured["cpu_s"] >= 0.7  # the child's second of CPU, less at most one 0.25 s sample
