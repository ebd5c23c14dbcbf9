"""How a model-based test runs: the settings of every machine (a fixed, derandomized set of examples unless
``ICEBERGSYNC_MODEL_EXAMPLES`` asks for a number; ``ICEBERGSYNC_MODEL_SHRINK=0`` skips shrinking) and the
judgement of the mix of actions and outcomes a run exercised."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

STEPS = int(os.environ.get("ICEBERGSYNC_MODEL_STEPS", "30"))

SETTINGS = settings(
    stateful_step_count=STEPS, deadline=None, database=None,
    derandomize="ICEBERGSYNC_MODEL_EXAMPLES" not in os.environ,
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    + ([] if os.environ.get("ICEBERGSYNC_MODEL_SHRINK") == "0" else [Phase.shrink]),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


def examples(default: int) -> int:
    """How many examples a machine runs: ``ICEBERGSYNC_MODEL_EXAMPLES``, else its ``default``."""
    return int(os.environ.get("ICEBERGSYNC_MODEL_EXAMPLES", str(default)))


def judge(machine: type[RuleBasedStateMachine], runs: int, coverage: Mapping[str, int], stats: Counter[str],
          capsys: pytest.CaptureFixture[str]) -> None:
    """Run ``machine`` for ``runs`` examples, print its mix of actions and outcomes (``stats``, which the
    machine counts into), fail when it is too thin (below ``coverage``)."""
    stats.clear()
    run_state_machine_as_test(machine, settings=settings(SETTINGS, max_examples=runs))
    with capsys.disabled():
        print(f"\n{machine.__name__}, {runs} examples x {STEPS} steps; the mix of actions and outcomes:")
        for key, value in sorted(stats.items()):
            print(f"  {key:55s} {value:6d}")
    thin = {key: (stats[key], least) for key, least in coverage.items() if stats[key] < least}
    assert not thin, f"the run exercised too little to judge the protocol (seen, needed): {thin}"
