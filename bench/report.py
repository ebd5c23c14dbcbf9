"""Re-render docs/benchmarks/internals/results.md and throughput.png from results.json: ``python -m bench.report``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.support.common import REPO
from bench.support.internals_report import write_report


def main(argv: list[str] | None = None) -> int:
    """Re-render results.md and the PNG from results.json (and the py-spy stacks left in the workdir)."""
    parser = argparse.ArgumentParser(prog="bench.report", description=main.__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "internals")
    parser.add_argument("--workdir", type=Path, default=Path("/dev/shm/icebergsync-bench"))
    args = parser.parse_args(argv)
    document = json.loads((args.out / "results.json").read_text())
    for layout in ("unpartitioned", "partitioned"):
        stacks = args.workdir / f"pyspy-{layout}.txt"
        if stacks.exists():
            document[f"profile_{layout}"] = stacks.read_text()
    write_report(document, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
