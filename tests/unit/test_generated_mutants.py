"""The generated mutants (tests/mutation/generated.py): each family, the skips, stable ids, the real targets."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.mutation.campaign import MODEL_TEST, run_campaign
from tests.mutation.generated import (
    TARGETS,
    GeneratedMutant,
    generate,
    mutants_of,
    sample,
    target_files,
    target_of,
)
from tests.mutation.run import REPO


@pytest.fixture(scope="module")
def real_mutants() -> list[GeneratedMutant]:
    """Every generated mutant of the repository's targets."""
    return generate(REPO)


def changes(source: str) -> set[tuple[str, str, str]]:
    """The (kind, original, replacement) of every mutant of ``source``."""
    return {(m.id.split(":")[-1].split("#")[0], m.original, m.replacement)
            for m in mutants_of("snippet.py", "snippet", textwrap.dedent(source))}


def mutated(source: str, kind: str) -> list[str]:
    """``source`` with each of its mutants of ``kind`` made."""
    source = textwrap.dedent(source)
    return [m.mutate(source) for m in mutants_of("snippet.py", "snippet", source) if f":{kind}#" in m.id]


@pytest.mark.parametrize(("operator", "swapped"), [("<", "<="), ("<=", "<"), (">", ">="), (">=", ">"),
                                                    ("==", "!="), ("!=", "=="), ("in", "not in"),
                                                    ("not in", "in"), ("is", "is not"), ("is not", "is")])
def test_each_comparison_is_swapped_for_its_neighbour(operator: str, swapped: str) -> None:
    source = f"def f(a, b):\n    return a {operator} b\n"
    assert mutated(source, f"{operator}/{swapped}".replace(" ", "-")) == [f"def f(a, b):\n    return a {swapped} b\n"]


def test_each_operator_of_a_chained_comparison_is_swapped_alone() -> None:
    assert mutated("def f(a, b, c):\n    return a < b <= c\n", "</<=") == ["def f(a, b, c):\n    return a <= b <= c\n"]
    assert mutated("def f(a, b, c):\n    return a < b <= c\n", "<=/<") == ["def f(a, b, c):\n    return a < b < c\n"]


def test_and_or_are_swapped_and_each_operand_dropped() -> None:
    found = changes("""
        def f(a, b, c):
            return a and (b or c)
    """)
    assert ("and/or", "and", "or") in found
    assert ("or/and", "or", "and") in found
    assert ("and-operand-dropped", "a and (b or c)", "(b or c)") in found
    assert ("and-operand-dropped", "a and (b or c)", "a") in found
    assert ("or-operand-dropped", "b or c", "c") in found
    assert ("or-operand-dropped", "b or c", "b") in found


def test_not_is_dropped_keeping_its_operand_whole() -> None:
    assert mutated("def f(a, b):\n    return not (a or b)\n", "not-dropped") == ["def f(a, b):\n    return (a or b)\n"]


def test_integer_constants_and_slice_bounds_are_moved_by_one() -> None:
    found = changes("""
        def f(items, n):
            return items[1:n]
    """)
    assert {("int+1", "1", "2"), ("int-1", "1", "0"), ("slice+1", "n", "n + 1"), ("slice-1", "n", "n - 1")} <= found
    assert ("slice+1", "n - k", "(n - k) + 1") in changes("def f(items, n, k):\n    return items[:n - k]\n")


def test_booleans_are_not_integers_to_move() -> None:
    assert not [c for c in changes("def f():\n    return g(True)\n") if c[0].startswith("int")]


def test_conditions_are_replaced_by_true_and_false() -> None:
    found = changes("""
        def f(a, items):
            if a > 1:
                g()
            return [x for x in items if x] if a else None
    """)
    assert {("if-True", "a > 1", "True"), ("if-False", "a > 1", "False"), ("if-True", "a", "True"),
            ("if-False", "a", "False"), ("filter-True", "x", "True"), ("filter-False", "x", "False")} <= found


def test_min_and_max_are_swapped() -> None:
    assert changes("def f(a, b):\n    return min(a, b) + max(a, b)\n") == {
        ("min-swapped", "min", "max"), ("max-swapped", "max", "min")}


def test_messages_logging_docstrings_annotations_and_representations_are_left_alone() -> None:
    assert changes('''
        """A module docstring: 1 < 2."""
        import logging

        def f(a: int = 1) -> list[int]:
            """Not here: a < b."""
            logging.getLogger().info("%s", a > 1)
            notes.append(f"{a + 1 > 2}")
            print(a < 2)
            raise ValueError(a == 2)

        class C:
            def __repr__(self) -> str:
                return "C" if self.a > 1 else "D"
    ''') == {("int+1", "1", "2"), ("int-1", "1", "0")}  # only the default of ``a``


def test_mutants_that_leave_the_bytecode_as_it_was_are_skipped() -> None:
    # The test is already True: "if-True" would compile to the same code, and is not generated.
    assert {c[0] for c in changes("def f():\n    if True:\n        g()\n")} == {"if-False"}


def test_a_mutant_is_located_by_line_and_column_in_characters() -> None:
    source = 'def f(a):\n    s = "é"\n    return a < 2\n'
    (mutant,) = [m for m in mutants_of("snippet.py", "snippet", source) if m.replacement == "<="]
    assert (mutant.line, mutant.column, mutant.end_line, mutant.end_column) == (3, 13, 3, 14)
    assert mutant.what == "snippet.py:3:14 `<` -> `<=`"
    with pytest.raises(ValueError, match="no longer holds"):
        mutant.mutate(source.replace("a < 2", "a + 2"))


def test_ids_are_stable_and_survive_edits_elsewhere_in_the_file() -> None:
    source = "def f(a, b):\n    return a < b and b < 3\n"
    first = mutants_of("snippet.py", "snippet", source)
    assert [m.id for m in first] == [m.id for m in mutants_of("snippet.py", "snippet", source)]
    assert len({m.id for m in first}) == len(first)
    assert "snippet:f:</<=#1" in {m.id for m in first}
    moved = mutants_of("snippet.py", "snippet", "X = [1]\n\n\n" + source)
    assert {m.id for m in first} <= {m.id for m in moved}


def test_every_mutant_of_the_real_targets_compiles_differs_and_has_a_distinct_id(
        real_mutants: list[GeneratedMutant]) -> None:
    mutants = real_mutants
    assert len({m.id for m in mutants}) == len(mutants)
    assert {target_of(m).name for m in mutants} == {t.name for t in TARGETS}
    sources = {path: (REPO / path).read_text() for path in {m.path for m in mutants}}
    for mutant in mutants:
        source = mutant.mutate(sources[mutant.path])
        assert source != sources[mutant.path]
        compile(source, mutant.path, "exec")


def test_every_target_and_judging_test_exists() -> None:
    for target in TARGETS:
        assert all((REPO / path).exists() for path in target.paths), target.paths
        assert target_files(target, REPO), target.paths
        for test in (*target.deterministic, *target.integration):
            assert (REPO / test).is_file(), test


def test_a_sample_is_fixed_by_its_seed_and_spread_over_the_targets(real_mutants: list[GeneratedMutant]) -> None:
    mutants = real_mutants
    drawn = sample(mutants, len(TARGETS) * 2, seed=7)
    assert drawn == sample(mutants, len(TARGETS) * 2, seed=7)
    assert drawn != sample(mutants, len(TARGETS) * 2, seed=8)
    assert sorted(target_of(m).name for m in drawn) == sorted([t.name for t in TARGETS] * 2)


def test_planting_edits_the_copy_only(tmp_path: Path, real_mutants: list[GeneratedMutant]) -> None:
    mutant = real_mutants[0]
    (tmp_path / mutant.path).parent.mkdir(parents=True)
    (tmp_path / mutant.path).write_text((REPO / mutant.path).read_text())
    mutant.plant(tmp_path)
    assert (tmp_path / mutant.path).read_text() == mutant.mutate((REPO / mutant.path).read_text())


def test_the_campaign_judges_in_stages_until_one_kills_and_reports_both_scores(
        tmp_path: Path, real_mutants: list[GeneratedMutant]) -> None:
    protocol, cut = (next(m for m in real_mutants if target_of(m).name == name) for name in ("protocol", "cut"))
    runs: list[tuple[str, tuple[str, ...]]] = []

    def judge(name: str, plant: object, tests: Sequence[str]) -> tuple[bool, float, str]:
        runs.append((name, tuple(tests)))
        killed = name == protocol.id and tuple(tests) == target_of(protocol).deterministic
        return killed, 1.0, "FAILED tests/unit/test_protocol.py::x - AssertionError" if killed else ""

    report = tmp_path / "report.md"
    assert not run_campaign([protocol, cut], judge, 1, report, "Two")
    assert runs == [(protocol.id, (MODEL_TEST,)), (protocol.id, target_of(protocol).deterministic),
                    (cut.id, (MODEL_TEST,)), (cut.id, target_of(cut).deterministic), (cut.id, target_of(cut).integration)]
    text = report.read_text()
    assert "| protocol | 1 | 0/1 (0%) | 1/1 (100%) |" in text and "| **total** | 2 | 0/2 (0%) | 1/2 (50%) |" in text
    assert f"## Survivors\n\n- `{cut.id}`" in text and "Judged: 2 of 2." in text
