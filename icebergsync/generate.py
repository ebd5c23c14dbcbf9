"""Write the files generated from the models: every CRD copy and the reference pages.

``python -m icebergsync.generate --write`` rewrites them in the repository; without ``--write`` it
prints the IcebergSync CRD. Unit tests fail when a committed copy differs from what this writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from icebergsync.catalogs.crd import render_catalog_crds
from icebergsync.crd import render_crd_yaml
from icebergsync.docs_reference import render_catalog_reference, render_reference

CRD_DIRECTORIES = ("crds", "charts/icebergsync/crds")
GENERATED_CRD_PATHS = tuple(f"{directory}/icebergsync.yaml" for directory in CRD_DIRECTORIES)
GENERATED_REFERENCE_PATH = "docs/configuration.md"
GENERATED_CATALOG_REFERENCE_PATH = "docs/catalog-reference.md"


def generated_files() -> dict[str, str]:
    """Every generated file's text, by its path in the repository."""
    crds = {"icebergsync.yaml": render_crd_yaml(), **render_catalog_crds()}
    files = {f"{directory}/{name}": text for directory in CRD_DIRECTORIES for name, text in crds.items()}
    return {**files, GENERATED_REFERENCE_PATH: render_reference(),
            GENERATED_CATALOG_REFERENCE_PATH: render_catalog_reference()}


def write_generated(root: Path) -> list[Path]:
    """Rewrite every generated file (the CRD copies, the reference pages)."""
    written = []
    for relative, text in generated_files().items():
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
                        help="rewrite every generated file in the repository (" + ", ".join(generated_files()) + ")")
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
