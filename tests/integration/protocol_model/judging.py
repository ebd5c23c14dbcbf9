"""How a model-based test runs: the settings of every machine (a fixed set of examples, drawn from a seed of its
own, unless ``ICEBERGSYNC_MODEL_EXAMPLES`` asks for a number; ``ICEBERGSYNC_MODEL_SHRINK=0`` skips shrinking) and
the judgement of the mix of actions and outcomes a run exercised.

The suite's seed is the machine's name (or the seed it sets itself), not Hypothesis's ``derandomize`` digest: that
digest hashes the machine class's source, so editing a docstring or an import path in it drew another run, with
other counts of each path.

A machine's coverage floors are stated for its suite run, the derandomized examples of ``DEFAULT_STEPS`` steps it
runs by default, which must meet each floor exactly: it is the same run every time, so a floor it misses means the
machine stopped exercising a path. Any other run (random, of any number of examples and steps) is held to what
its size makes certain (:func:`floors`), from the rate at which random runs exercise each path: a run that never
exercises a path fails once it is long enough for that to be no accident, and the chance that a valid run fails
by bad luck is negligible.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Mapping

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

DEFAULT_STEPS = 30
STEPS = int(os.environ.get("ICEBERGSYNC_MODEL_STEPS", str(DEFAULT_STEPS)))
DERANDOMIZED = "ICEBERGSYNC_MODEL_EXAMPLES" not in os.environ
# A run other than the suite's needs, of each path, the count that half the count it can expect exceeds but with a
# probability of at most ``UNLUCKY`` (Poisson). The half absorbs what a Poisson count leaves out (examples
# differ in length: a path's occurrences bunch) and the error of the measured rates; a run holds a few dozen
# floors.
RANDOM_RUN_SLACK = 2
UNLUCKY = 1e-6

SETTINGS = settings(
    stateful_step_count=STEPS, deadline=None, database=None,
    derandomize=DERANDOMIZED,
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    + ([] if os.environ.get("ICEBERGSYNC_MODEL_SHRINK") == "0" else [Phase.shrink]),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


def examples(default: int) -> int:
    """How many examples a machine runs: ``ICEBERGSYNC_MODEL_EXAMPLES``, else its ``default``."""
    return int(os.environ.get("ICEBERGSYNC_MODEL_EXAMPLES", str(default)))


def poisson_floor(mean: float, unlucky: float = UNLUCKY) -> int:
    """The largest count ``k`` such that a Poisson count of ``mean`` falls below ``k`` with a probability of at
    most ``unlucky`` (0 when even seeing nothing is likelier than that)."""
    log_term, below, k = -mean, 0.0, 0  # log P(X = k), P(X < k)
    while k < mean:
        below += math.exp(log_term)
        if below > unlucky:
            return k
        k += 1
        log_term += math.log(mean / k)
    return k


def floors(coverage: Mapping[str, int], runs: int, default_runs: int, rates: Mapping[str, float] | None = None,
           steps: int = STEPS, derandomized: bool = DERANDOMIZED) -> dict[str, int]:
    """What a run of ``runs`` examples of ``steps`` steps must have seen of each path of ``coverage``, the floors
    of the suite's run (``default_runs`` derandomized examples of ``DEFAULT_STEPS`` steps).

    The suite's run needs exactly ``coverage``. Any other run expects of a path its rate (``rates``: how many
    times per example of ``DEFAULT_STEPS`` steps random runs exercise it, as measured; else the floor's own
    rate, ``least / default_runs``) times its size, and needs :func:`poisson_floor` of a
    ``1 / RANDOM_RUN_SLACK`` of that: nothing of a path a run of its size may miss by chance, at least one once
    missing it is no accident, and proportionally more in longer runs."""
    if derandomized and runs == default_runs and steps == DEFAULT_STEPS:
        return dict(coverage)
    rates = rates or {}
    size = runs * steps / DEFAULT_STEPS / RANDOM_RUN_SLACK
    return {key: poisson_floor(rates.get(key, least / default_runs) * size) for key, least in coverage.items()}


def judge(machine: type[RuleBasedStateMachine], runs: int, coverage: Mapping[str, int], stats: Counter[str],
          capsys: pytest.CaptureFixture[str], default_runs: int, rates: Mapping[str, float] | None = None) -> None:
    """Run ``machine`` for ``runs`` examples, print its mix of actions and outcomes (``stats``, which the
    machine counts into), fail when it is too thin: below :func:`floors` of ``coverage``, the floors of its suite
    run of ``default_runs`` examples, and ``rates``, the rates at which random runs exercise its paths."""
    stats.clear()
    factory: Callable[[], RuleBasedStateMachine] = machine
    if DERANDOMIZED and getattr(machine, "_hypothesis_internal_use_seed", None) is None:
        factory = seed(machine.__name__)(lambda: machine())
    run_state_machine_as_test(factory, settings=settings(SETTINGS, max_examples=runs))
    needed = floors(coverage, runs, default_runs, rates)
    with capsys.disabled():
        print(f"\n{machine.__name__}, {runs} examples x {STEPS} steps; the mix of actions and outcomes"
              f" (and what the run needs of it):")
        for key in sorted(set(stats) | set(needed)):
            print(f"  {key:55s} {stats[key]:6d}" + (f"  ({needed[key]})" if key in needed else ""))
    thin = {key: (stats[key], least) for key, least in needed.items() if stats[key] < least}
    assert not thin, f"the run exercised too little to judge the protocol (seen, needed): {thin}"
