"""The operator's memory against hostile catalogs, with the real operator (docs/security.md row 8).

Fifty syncs in five namespaces on gzip bombs and endless bodies (created at once, and retried after the
chart's failure backoff) keep the operator's peak RSS under the chart's memory limit, while a sync in another namespace keeps its status refreshed within two timer
periods and the operator stays live.

Peak RSS is the kernel's high-water mark of the operator process (``VmHWM`` in /proc/<pid>/status): exact,
with no sampling gaps. ``RLIMIT_AS`` is no stand-in for the pod's limit: it counts address space, of which
every thread's stack and malloc arena reserve tens of MiB never touched (this operator with 30 idle threads:
1.3 GiB), and an unprivileged test cannot create a cgroup here.
"""

from __future__ import annotations

import itertools
import re
import time
import uuid
from pathlib import Path

from kubernetes import client

from tests.e2e.conftest import Kube, OperatorProcess, wait_for
from tests.e2e.test_hostile_catalogs import rest, silence
from tests.e2e.test_operator import Lake, StartOperator, generator_spec
from tests.hostile_servers import Listener, endless, gzip_bomb, respond

CHART_MEMORY_LIMIT = 512 * 1024**2  #: charts/icebergsync/values.yaml resources.limits.memory
HOSTILE_NAMESPACES, PER_NAMESPACE = 5, 10
TIMER = 3.0  #: seconds, the operator's --timer-interval here (the chart's: 30s)
CHART_BACKOFF = ("--backoff-base", "10s", "--backoff-cap", "10m")  #: the chart's, not the fixture's fast ones
SAMPLE_SECONDS = 25.0


def peak_rss(operator: OperatorProcess) -> int:
    """The operator's peak resident memory so far, in bytes (its Python process runs under ``timeout``)."""
    assert operator.process is not None
    wrapper = operator.process.pid
    [child] = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()
    status = Path(f"/proc/{child}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status)[1]) * 1024  # type: ignore[index]


def namespace(kube: Kube) -> Kube:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return Kube(kube.api_client, name)


def test_fifty_hostile_catalogs_stay_within_the_charts_memory_limit_and_others_stay_fresh(
        kube: Kube, other_kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    hostile = [kube, *(namespace(kube) for _ in range(HOSTILE_NAMESPACES - 1))]
    bomb = respond("200 OK", {"Content-Type": "application/json", "Content-Encoding": "gzip"},
                   gzip_bomb(64 * 1024**2))
    with Listener(bomb) as bombing, Listener(endless) as flooding:
        other_kube.create_sync("steady", generator_spec(warehouse))
        operator = start_operator("--timer-interval", str(TIMER), "--stall-threshold", "1", *CHART_BACKOFF,
                                  "--allowed-catalog-uris", f"{bombing.url},{flooding.url}",
                                  watch=(other_kube.namespace, *(tenant.namespace for tenant in hostile[1:])))
        other_kube.wait_applications({"steady-v1"})
        other_kube.set_state("steady-v1", "RUNNING")
        wait_for("the steady sync to report its silence", lambda: silence(other_kube, "steady"))

        servers = itertools.cycle((bombing, flooding))
        for tenant in hostile:
            for index in range(PER_NAMESPACE):
                tenant.create_sync(f"hostile-{index}", generator_spec(rest(next(servers).url)))
        refreshes: list[tuple[float, int]] = []
        started = time.monotonic()
        while time.monotonic() - started < SAMPLE_SECONDS:
            value = silence(other_kube, "steady")
            if value is not None and (not refreshes or value != refreshes[-1][1]):
                refreshes.append((time.monotonic(), value))
            assert operator.liveness() == 200
            time.sleep(0.25)

        peak = peak_rss(operator)
        assert bombing.connections >= HOSTILE_NAMESPACES and flooding.connections >= HOSTILE_NAMESPACES
        for tenant in hostile:
            ready = next(c for c in tenant.status("hostile-0").get("conditions", []) if c["type"] == "Ready")
            assert ready["reason"] == "WaitingForCatalog" and "sent" in ready["message"], ready

    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(refreshes)]
    assert peak < CHART_MEMORY_LIMIT, f"peak RSS {peak / 1024**2:.0f} MiB"
    assert len(refreshes) >= SAMPLE_SECONDS / (2 * TIMER), refreshes
    assert max(gaps) <= 2 * TIMER, refreshes
    assert 'icebergsync_operator_reconciles_total{result="error"}' not in operator.metrics()
