"""The operator against hostile tenants' catalogs, on the real API server (docs/security.md).

Every attack the threat model lists ends refused with a clear condition and one event, and no
listener standing in for the attacker's target sees a connection; thirty tarpit catalogs in one
namespace leave a sync in another namespace getting its status refreshed every timer period, and
the operator live. The hostile servers are ``tests/hostile_servers.py`` listeners on 127.0.0.1.
"""

from __future__ import annotations

import itertools
import re
import time
from typing import Any

from kubernetes import client

from tests.e2e.conftest import Kube, wait_for
from tests.e2e.test_operator import Lake, StartOperator, generator_spec
from tests.hostile_servers import Listener, drip, gzip_bomb, respond, silent_postgres

TIMEOUT = "3"  #: --catalog-timeout of these operators, in seconds
TARPITS = 30
SAMPLE_SECONDS = 20.0
REFRESH_BOUND = 6.0  #: seconds: a generous bound on the gap between two status refreshes (the timer is 1 s)


def rest(uri: str, **catalog: Any) -> dict[str, Any]:
    return {"type": "rest", "uri": uri, **catalog}


def ready(kube: Kube, name: str) -> dict[str, Any]:
    return next(c for c in kube.status(name).get("conditions", []) if c["type"] == "Ready")


def messages(kube: Kube, name: str) -> str:
    """Every condition's message (a policy violation names its fields under Stalled, a catalog under Ready)."""
    return " | ".join(c["message"] for c in kube.status(name).get("conditions", []))


def test_each_attack_ends_refused_with_a_condition_and_an_event(kube: Kube, start_operator: StartOperator) -> None:
    bomb = respond("200 OK", {"Content-Type": "application/json", "Content-Encoding": "gzip"},
                   gzip_bomb(64 * 1024**2))
    with Listener() as attacker, Listener() as elsewhere, Listener() as tarpit, Listener(drip) as dripping, \
            Listener(bomb) as bombing, Listener(silent_postgres) as postgres, \
            Listener(respond("302 Found", {"Location": f"{elsewhere.url}/v1/config"})) as redirecting:
        kube.core.create_namespaced_secret(kube.namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name="oauth"), string_data={"credential": "client:secret"}))
        cases = {
            "backslash": (rest(f"http://127.0.0.1:{attacker.port}\\@catalog.internal/"), "PolicyViolation",
                          "contains a backslash"),
            "userinfo": (rest(f"http://127.0.0.1:{attacker.port}@catalog.internal/"), "PolicyViolation",
                         "has user information"),
            "oauth-tarpit": (rest(tarpit.url, secretRef={"name": "oauth"}), "WaitingForCatalog",
                             f"catalog at {tarpit.url} did not answer within 3s"),
            "slow-drip": (rest(dripping.url), "WaitingForCatalog",
                          f"catalog at {dripping.url} did not answer within 3s"),
            "gzip-bomb": (rest(bombing.url), "WaitingForCatalog",
                          f"catalog at {bombing.url} sent a response larger than 1048576 bytes"),
            "silent-postgres": ({"type": "sql", "uri": f"postgresql://sync:pw@127.0.0.1:{postgres.port}/catalog"},
                                "WaitingForCatalog",
                                f"catalog at postgresql://127.0.0.1:{postgres.port}/catalog did not answer within 3s"),
            "redirect": (rest(redirecting.url), "WaitingForCatalog",
                         f"catalog at {redirecting.url} answered with a redirect (HTTP 302)"),
        }
        for name, (catalog, _, _) in cases.items():
            kube.create_sync(name, generator_spec(catalog))
        # Every hostile server is listed: the admin allowed it, the attack is in what it answers.
        listed = [server.url for server in (tarpit, dripping, bombing, redirecting)]
        operator = start_operator("--catalog-timeout", TIMEOUT, "--catalog-max-bytes", "1Mi",
                                  "--max-namespace-catalog-reads", str(len(cases)), "--allowed-catalog-uris",
                                  ",".join([*listed, f"postgresql://127.0.0.1:{postgres.port}"]))

        for name, (_, reason, text) in cases.items():
            kube.wait_status(name, reason, lambda s, reason=reason: any(  # type: ignore[misc]
                c["type"] == "Ready" and c["reason"] == reason for c in s.get("conditions", [])))
            assert text in messages(kube, name), name
        operator.wait_reconciles(len(cases))
        for name, (_, reason, _) in cases.items():
            assert kube.event_reasons(name) == [reason], name
        assert kube.applications() == {}
        assert (attacker.connections, elsewhere.connections) == (0, 0)
        assert tarpit.connections >= 1 and postgres.connections >= 1
        assert operator.liveness() == 200
        assert 'icebergsync_operator_reconciles_total{result="error"}' not in operator.metrics()


def silence(kube: Kube, name: str) -> int | None:
    """The commit silence the sync's Ready condition reports, which grows with every status refresh."""
    match = re.search(r"has not committed for (\d+)s", ready(kube, name)["message"])
    return int(match[1]) if match else None


def test_thirty_tarpit_syncs_leave_another_namespaces_status_refreshing_on_time(
        kube: Kube, other_kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    with Listener() as tarpit:
        for index in range(TARPITS):
            kube.create_sync(f"tarpit-{index}", generator_spec(rest(tarpit.url)))
        other_kube.create_sync("steady", generator_spec(warehouse))
        operator = start_operator("--catalog-timeout", TIMEOUT, "--stall-threshold", "1",
                                  "--max-stuck-catalog-reads", str(TARPITS), "--max-namespace-catalog-reads",
                                  str(TARPITS), "--max-catalog-reads", str(TARPITS + 2),
                                  "--allowed-catalog-uris", tarpit.url, watch=(other_kube.namespace,))
        other_kube.wait_applications({"steady-v1"})
        other_kube.set_state("steady-v1", "RUNNING")
        wait_for("every tarpit sync to wait for its catalog", lambda: all(
            kube.condition(f"tarpit-{index}", "Ready") == ("False", "WaitingForCatalog") for index in range(TARPITS)),
            timeout=120)
        wait_for("the steady sync to report its silence", lambda: silence(other_kube, "steady"))

        refreshes: list[tuple[float, int]] = []
        started = time.monotonic()
        while time.monotonic() - started < SAMPLE_SECONDS:
            value = silence(other_kube, "steady")
            if value is not None and (not refreshes or value != refreshes[-1][1]):
                refreshes.append((time.monotonic(), value))
            assert operator.liveness() == 200
            time.sleep(0.25)
        assert tarpit.connections >= TARPITS
        # Read while the tarpit still listens: once it closes, a retried read is refused ("cannot connect").
        for index in range(TARPITS):
            message = ready(kube, f"tarpit-{index}")["message"]
            assert f"catalog at {tarpit.url} did not answer within 3s" in message
            assert kube.event_reasons(f"tarpit-{index}") == ["WaitingForCatalog"]

    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(refreshes)]
    assert len(refreshes) >= SAMPLE_SECONDS / REFRESH_BOUND, refreshes
    assert max(gaps) < REFRESH_BOUND, refreshes
    assert 'icebergsync_operator_reconciles_total{result="error"}' not in operator.metrics()
