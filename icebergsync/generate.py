"""Write the files generated from the spec model: both CRD copies and the configuration reference.

``python -m icebergsync.generate --write`` rewrites them in the repository; without ``--write`` it
prints the CRD. Unit tests fail when a committed copy differs from what this writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from icebergsync.crd import render_crd_yaml
from icebergsync.docs_reference import render_reference

GENERATED_CRD_PATHS = ("crds/icebergsync.yaml", "charts/icebergsync/crds/icebergsync.yaml")
GENERATED_REFERENCE_PATH = "docs/configuration.md"


def write_generated(root: Path) -> list[Path]:
    """Rewrite every file generated from the spec model (both CRD copies, the configuration reference)."""
    written = []
    for relative, text in [*((path, render_crd_yaml()) for path in GENERATED_CRD_PATHS),
                           (GENERATED_REFERENCE_PATH, render_reference())]:
        target = root / relative
        target.write_text(text)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    """Print the CRD, write it to ``--output``, or rewrite every generated file with ``--write``."""
    parser = argparse.ArgumentParser(prog="python -m icebergsync.generate",
                                     description="Print the IcebergSync CRD or rewrite every generated file.")
    parser.add_argument("--output", "-o", help="write the CRD to this file instead of stdout")
    parser.add_argument("--write", metavar="REPO", nargs="?", const=".",
                        help="rewrite every generated file in the repository (" + ", ".join(
                            (*GENERATED_CRD_PATHS, GENERATED_REFERENCE_PATH)) + ")")
    args = parser.parse_args(argv)
    if args.write:
        for path in write_generated(Path(args.write)):
            print(f"wrote {path}")
        return 0
    text = render_crd_yaml()
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
