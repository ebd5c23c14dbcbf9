"""Judge generated mutants (tests/mutation/generated.py) and score them per module and in total.

Each mutant is judged by the model test first; one it survives goes to the deterministic tests of its
module, then to the module's integration tests (``TARGETS``). The model's score is the share the model test
alone kills; the suite's, the share any stage kills. Mutants reviewed as equivalent (``EQUIVALENT``) are not
run and not counted. The report (markdown) is written again after every judged mutant, so a cut-short run
leaves what it judged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.mutation.equivalent import EQUIVALENT
from tests.mutation.generated import TARGETS, GeneratedMutant, target_of

MODEL_TEST = "tests/integration/test_protocol_model.py"
MODEL_BAR = 0.90
SUITE_BAR = 0.97

Judge = Callable[[str, Callable[[Path], None], Sequence[str]], tuple[bool, float, str]]


@dataclass(frozen=True)
class Verdict:
    """What became of one mutant: the stage that killed it (``None``: it survived), pytest's line naming the
    failure that killed it, and each stage's seconds."""

    mutant: GeneratedMutant
    killed_by: str | None
    failure: str
    seconds: tuple[tuple[str, float], ...]


def stages(mutant: GeneratedMutant) -> list[tuple[str, tuple[str, ...]]]:
    """The judges of ``mutant`` in order: the model test, then its module's deterministic and integration tests."""
    target = target_of(mutant)
    return [(name, tests) for name, tests in (("model", (MODEL_TEST,)), ("deterministic", target.deterministic),
                                              ("integration", target.integration)) if tests]


def verdict(mutant: GeneratedMutant, judge: Judge) -> Verdict:
    """Run the stages of ``mutant`` until one kills it."""
    seconds = []
    for name, tests in stages(mutant):
        caught, taken, failure = judge(mutant.id, mutant.plant, tests)
        seconds.append((name, taken))
        if caught:
            return Verdict(mutant, name, failure, tuple(seconds))
    return Verdict(mutant, None, "", tuple(seconds))


def rate(killed: int, judged: int) -> str:
    """``killed/judged`` with its percentage."""
    return f"{killed}/{judged} ({100 * killed / judged:.0f}%)" if judged else "0/0"


def score_lines(verdicts: Sequence[Verdict]) -> list[str]:
    """The per-module and total scores as a markdown table."""
    lines = ["| module | judged | model test alone | suite |", "| --- | --- | --- | --- |"]
    groups = [(t.name, [v for v in verdicts if target_of(v.mutant).name == t.name]) for t in TARGETS]
    for name, group in [*groups, ("**total**", list(verdicts))]:
        if group:
            model = sum(v.killed_by == "model" for v in group)
            suite = sum(v.killed_by is not None for v in group)
            lines.append(f"| {name} | {len(group)} | {rate(model, len(group))} | {rate(suite, len(group))} |")
    return lines


def report(verdicts: Sequence[Verdict], equivalent: Sequence[GeneratedMutant], title: str, total: int) -> str:
    """The markdown report: scores, survivors, equivalent mutants, and every verdict (of ``total`` to judge)."""
    lines = [f"# {title}", "", f"Judged: {len(verdicts)} of {total}.", "", *score_lines(verdicts), "",
             "## Survivors", ""]
    survivors = [v for v in verdicts if v.killed_by is None]
    lines += [f"- `{v.mutant.id}` ({v.mutant.family}): {v.mutant.what}" for v in survivors] or ["None."]
    if equivalent:
        lines += ["", "## Equivalent (not run)", ""]
        lines += [f"- `{m.id}`: {m.what} — {EQUIVALENT[m.id]}" for m in equivalent]
    lines += ["", "## Every verdict", "", "| mutant | change | killed by | the failure | seconds per judge |",
              "| --- | --- | --- | --- | --- |"]
    for v in verdicts:
        seconds = ", ".join(f"{name} {taken:.0f}" for name, taken in v.seconds)
        cells = [f"`{v.mutant.id}`", v.mutant.what, v.killed_by or "SURVIVED", v.failure[:160], seconds]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def run_campaign(mutants: Sequence[GeneratedMutant], judge: Judge, jobs: int, report_path: Path, title: str) -> bool:
    """Judge ``mutants`` ``jobs`` at a time, writing the report as verdicts come; whether both bars are met."""
    equivalent = [m for m in mutants if m.id in EQUIVALENT]
    judged = [m for m in mutants if m.id not in EQUIVALENT]
    verdicts: list[Verdict] = []
    lock = threading.Lock()

    def judge_one(mutant: GeneratedMutant) -> None:
        result = verdict(mutant, judge)
        with lock:
            verdicts.append(result)
            ordered = sorted(verdicts, key=lambda v: judged.index(v.mutant))
            report_path.write_text(report(ordered, equivalent, title, len(judged)))
            seconds = " ".join(f"{name} {taken:.0f}s" for name, taken in result.seconds)
            print(f"[{len(verdicts)}/{len(judged)}] {result.killed_by or 'SURVIVED':13s} {mutant.id}  ({seconds})",
                  flush=True)

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(judge_one, judged))
    ordered = sorted(verdicts, key=lambda v: judged.index(v.mutant))
    print("\n".join(score_lines(ordered)))
    print(f"report: {report_path}")
    model = sum(v.killed_by == "model" for v in ordered)
    suite = sum(v.killed_by is not None for v in ordered)
    return model >= MODEL_BAR * len(ordered) and suite >= SUITE_BAR * len(ordered)
