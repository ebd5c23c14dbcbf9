"""The peering object(s) replicas coordinate through: created by the operator, or first awaited from the chart.

Run on its own, the operator creates them. Installed by the Helm chart, the chart creates them (so
``helm uninstall`` removes them) and the operator waits for them: helm creates custom resources after the
Deployment, and an operator that created them first would fail the install with "already exists". Should
they still be missing after the wait (deleted since the install), the operator creates them after all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from icebergsync_operator.kube import KubeApi
from icebergsync_operator.settings import OperatorSettings

log = logging.getLogger(__name__)

PEERING_WAIT_SECONDS = 60.0  #: shorter than the chart's liveness probe allows a starting pod
PEERING_POLL_SECONDS = 1.0


def prepare_peering(api: KubeApi, settings: OperatorSettings, *, timeout: float = PEERING_WAIT_SECONDS,
                    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
    """Make sure the peering object(s) exist; with ``settings.create_peering`` off, wait for them first."""
    if not settings.create_peering and _appeared(api, settings, timeout, clock, sleep):
        return
    api.ensure_peering(settings.peering_name, settings.namespaces)


def _appeared(api: KubeApi, settings: OperatorSettings, timeout: float, clock: Callable[[], float],
              sleep: Callable[[float], None]) -> bool:
    """Whether every peering object exists within ``timeout`` seconds."""
    deadline = clock() + timeout
    while missing := api.missing_peerings(settings.peering_name, settings.namespaces):
        if clock() >= deadline:
            log.warning("the peering object %r is still missing (%s) after %.0f s: creating it", settings.peering_name,
                        ", ".join(missing), timeout)
            return False
        log.info("waiting for the peering object %r (%s)", settings.peering_name, ", ".join(missing))
        sleep(PEERING_POLL_SECONDS)
    return True
