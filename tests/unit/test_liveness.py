"""The liveness probe: kopf's own health endpoint, with the operator's handlers registered, answers 500
while a reconcile has run longer than --reconcile-stuck-after and 200 otherwise."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request

import kopf
from icebergsync_operator import handlers
from icebergsync_operator.context import OperatorContext
from icebergsync_operator.liveness import ReconcileWatch
from icebergsync_operator.settings import OperatorSettings
from kopf._core.engines.probing import health_reporter  # the endpoint kopf.run serves (kopf is pinned)


def test_the_watch_names_reconciles_running_longer_than_the_bound() -> None:
    watch = ReconcileWatch(stuck_after=300)
    start = time.monotonic()
    with watch.track("team-a", "trips"), watch.track("team-b", "orders"):
        assert watch.stuck(start + 10) == []
        assert watch.report(start + 10)["reconciling"] == 2
        assert watch.stuck(start + 301) == ["team-a/trips", "team-b/orders"]
    assert watch.stuck(start + 1000) == [] and watch.report() == {"reconciling": 0, "longestSeconds": 0.0}


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), ""


def test_the_health_endpoint_fails_while_a_reconcile_is_stuck_and_recovers_after() -> None:
    context = OperatorContext(api=None, settings=OperatorSettings(reconcile_stuck_after=0.2))  # type: ignore[arg-type]
    registry = kopf.OperatorRegistry()
    handlers.register(registry, context)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/healthz"

    async def scenario() -> tuple[int, tuple[int, str]]:
        ready = asyncio.Event()
        server = asyncio.create_task(health_reporter(url, memo=kopf.Memo(), indices={}, registry=registry,
                                                     settings=kopf.OperatorSettings(), ready_flag=ready))
        try:
            await asyncio.wait_for(ready.wait(), 30)
            with context.watch.track("team-a", "trips"):
                await asyncio.sleep(0.3)
                stuck, _ = await asyncio.to_thread(_get, url)
            return stuck, await asyncio.to_thread(_get, url)
        finally:
            server.cancel()

    stuck, (healthy, body) = asyncio.run(scenario())
    assert stuck == 500
    assert healthy == 200 and json.loads(body) == {"reconciles": {"reconciling": 0, "longestSeconds": 0.0}}
