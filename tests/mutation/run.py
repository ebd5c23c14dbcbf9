"""Plant each mutant in a copy of the source, run the judges on it, and print which catch it.

``python -m tests.mutation.run [--jobs N] [--only NAME ...] [--judge model|deterministic ...]``
``python -m tests.mutation.run --generated [--module NAME ...] [--sample N --seed S] [--jobs N] [--report PATH]``

The listed mutants (tests/mutation/mutants.py) have three judges: ``model`` is tests/integration/test_protocol_model.py
in the suite's setting (fixed seeds, not shrunk, so a catch is fast); ``deterministic`` is the protocol and
committer tests that need no Spark (and the unit tests of the keyed path); ``upkeep`` is the integration test of
upkeep's manifest rewrite. A mutant is caught when the judge's run fails. Exits 1 when the model catches fewer than
``REQUIRED`` of the reviewed or the new ten, or misses a keyed mutant or one of upkeep and expiry
(``JUDGE``); or when the upkeep judge misses an upkeep mutant.

``--generated`` judges mechanically generated mutants instead (tests/mutation/campaign.py): the model test, then
the module's deterministic and integration tests, and writes the scores and survivors to the report.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from tests.mutation.campaign import run_campaign
from tests.mutation.generated import TARGETS, generate, sample, target_of
from tests.mutation.mutants import JUDGE, KEYED, MUTANTS, NEW, REVIEWED, UPKEEP, Mutant

REPO = Path(__file__).resolve().parents[2]
COPIED = ("icebergsync", "spark_app", "operator", "tests", "scripts", "conftest.py", "pyproject.toml")
JUDGES = {
    "model": ["tests/integration/test_protocol_model.py"],
    "deterministic": ["tests/unit/test_protocol.py", "tests/integration/test_table_changes.py",
                      "tests/integration/test_committer.py", "tests/unit/test_changes.py", "tests/unit/test_key_index.py",
                      "tests/unit/test_position_deletes.py"],
    "upkeep": ["tests/integration/test_manifest_rewrite.py"],
}
REQUIRED = 9


def apply(mutant: Mutant, root: Path) -> None:
    """Plant ``mutant`` in the source tree at ``root``; raise ValueError when its text is not there exactly once."""
    for path, old, new in mutant.replacements:
        source = (root / path).read_text()
        if source.count(old) != 1:
            raise ValueError(f"{mutant.name}: {path} holds its text {source.count(old)} times, not once")
        (root / path).write_text(source.replace(old, new))


def judge(name: str, plant: Callable[[Path], None], tests: Sequence[str]) -> tuple[bool, float, str]:
    """Whether ``tests`` fail on a copy of the source where ``plant`` put mutant ``name``, the seconds taken,
    and pytest's line naming the first failure (empty when none)."""
    with tempfile.TemporaryDirectory(prefix=f"isync-mutant-{safe_name(name)}-") as directory:
        root = Path(directory)
        for copied in COPIED:
            source = REPO / copied
            if source.is_dir():
                shutil.copytree(source, root / copied, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, root / copied)
        plant(root)
        # The copy comes first on the path: the venv's editable install maps to the real tree only as a fallback.
        # The services' scripts find Spark's jars in the venv: the real one (the copy has none).
        env = {"ICEBERGSYNC_VENV": str(REPO / ".venv"), **os.environ, "PYTHONPATH": str(root),
               "ICEBERGSYNC_MODEL_SHRINK": "0", "COLUMNS": "400"}  # wide enough for pytest to name the failure
        env.pop("ICEBERGSYNC_MODEL_EXAMPLES", None)
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                 "--timeout=900", *tests],
                                cwd=root, env=env, capture_output=True, text=True, check=False)
        failures = [line for line in result.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
        return result.returncode != 0, time.monotonic() - started, (failures or [""])[0]


def safe_name(name: str) -> str:
    """``name`` with what a file name should not hold made dashes."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)[:80]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2, help="mutants judged at once")
    parser.add_argument("--only", nargs="*", default=None, help="mutant names or generated ids (default: all)")
    parser.add_argument("--judge", nargs="*", default=list(JUDGES), choices=list(JUDGES),
                        help="the listed mutants' judges")
    parser.add_argument("--generated", action="store_true", help="judge generated mutants (tests/mutation/generated.py)")
    parser.add_argument("--module", nargs="*", default=None, choices=[t.name for t in TARGETS],
                        help="generated mutants of these modules only")
    parser.add_argument("--sample", type=int, default=None, help="draw this many generated mutants across the modules")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed")
    parser.add_argument("--report", type=Path, default=REPO / "docs/testing-mutation-generated.md",
                        help="the generated mutants' markdown report")
    args = parser.parse_args()
    return generated_main(args) if args.generated else listed_main(args)


def generated_main(args: argparse.Namespace) -> int:
    """Judge the generated mutants the arguments choose; 1 when a score is under campaign.py's ``MODEL_BAR`` or ``SUITE_BAR``."""
    mutants = [m for m in generate(REPO) if (args.module is None or target_of(m).name in args.module)
               and (args.only is None or m.id in args.only)]
    if args.sample is not None:
        mutants = sample(mutants, args.sample, args.seed)
    chosen = f"a sample of {len(mutants)} (seed {args.seed})" if args.sample is not None else f"{len(mutants)}"
    title = f"Generated mutants: {chosen}, modules {', '.join(args.module or [t.name for t in TARGETS])}"
    return 0 if run_campaign(mutants, judge, args.jobs, args.report, title) else 1


def listed_main(args: argparse.Namespace) -> int:
    """Judge the listed mutants (tests/mutation/mutants.py); 1 when a judge misses more than its bar allows."""
    chosen = [m for m in MUTANTS if args.only is None or m.name in args.only]
    work = [(m, j) for m in chosen for j in args.judge]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = dict(zip(work, pool.map(lambda item: judge(item[0].name, partial(apply, item[0]), JUDGES[item[1]]), work), strict=True))
    print(f"{'mutant':36s} " + " ".join(f"{j:>15s}" for j in args.judge))
    for mutant in chosen:
        cells = []
        for name in args.judge:
            caught, seconds, _ = results[(mutant, name)]
            cells.append(f"{'caught' if caught else 'MISSED':>7s} {seconds:6.0f}s")
        print(f"{mutant.name:36s} " + " ".join(f"{c:>15s}" for c in cells) + f"   {mutant.what}")
    if args.only is not None:
        return 0
    short = False
    if "model" in args.judge:
        for label, group in (("reviewed", REVIEWED), ("new", NEW), ("keyed", KEYED), ("upkeep and expiry", JUDGE)):
            hits = sum(results[(m, "model")][0] for m in group)
            needed = min(REQUIRED, len(group)) if group in (REVIEWED, NEW) else len(group)
            print(f"the model test caught {hits} of the {len(group)} {label} mutants (needed: {needed})")
            short = short or hits < needed
    if "upkeep" in args.judge:
        hits = sum(results[(m, "upkeep")][0] for m in UPKEEP)
        print(f"the upkeep tests caught {hits} of the {len(UPKEEP)} upkeep mutants (needed: {len(UPKEEP)})")
        short = short or hits < len(UPKEEP)
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
