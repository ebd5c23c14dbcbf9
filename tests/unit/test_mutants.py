"""The mutation check's planted bugs still apply to the code they target (tests/mutation/)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.mutation.mutants import CUT_MODEL, JUDGE, KEYED, MUTANTS, NEW, REVIEWED, UPKEEP, Mutant
from tests.mutation.run import REPO, apply


def test_the_mutant_groups_have_their_sizes_and_distinct_names() -> None:
    assert (len(REVIEWED), len(NEW), len(KEYED), len(UPKEEP), len(JUDGE), len(CUT_MODEL)) == (10, 10, 7, 1, 6, 1)
    assert len({m.name for m in MUTANTS}) == 35


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_plants_its_bug_once_and_still_compiles(mutant: Mutant, tmp_path: Path) -> None:
    for path in {path for path, _, _ in mutant.replacements}:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / path, tmp_path / path)
    apply(mutant, tmp_path)
    for path in {path for path, _, _ in mutant.replacements}:
        source = (tmp_path / path).read_text()
        assert source != (REPO / path).read_text()
        compile(source, path, "exec")
