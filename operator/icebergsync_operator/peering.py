"""The peering object(s) replicas coordinate through: created by the operator, or awaited from whoever deploys them.

Exactly one party creates them. Run on its own the operator does; installed by the Helm chart, the chart does
(so ``helm uninstall`` removes them) and the operator waits for them: helm creates custom resources after the
Deployment, and an operator that created them first would fail the install with "already exists".
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


class PeeringUnavailableError(Exception):
    """The peering object(s) the operator was told to wait for did not appear in time."""


def prepare_peering(api: KubeApi, settings: OperatorSettings, *, timeout: float = PEERING_WAIT_SECONDS,
                    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
    """Create the peering object(s), or wait until they exist when ``settings.create_peering`` is off."""
    if settings.create_peering:
        api.ensure_peering(settings.peering_name, settings.namespaces)
        return
    deadline = clock() + timeout
    while missing := api.missing_peerings(settings.peering_name, settings.namespaces):
        if clock() >= deadline:
            raise PeeringUnavailableError(
                f"peering object {settings.peering_name!r} still missing ({', '.join(missing)}) after {timeout:.0f} s; "
                "it is created by the chart (peering.create=true), or by the operator with --create-peering")
        log.info("waiting for the peering object %r (%s)", settings.peering_name, ", ".join(missing))
        sleep(PEERING_POLL_SECONDS)
