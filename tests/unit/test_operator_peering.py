"""Who creates the peering object: the operator on its own, or the chart (the operator waits for it first)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from icebergsync_operator.peering import prepare_peering
from icebergsync_operator.settings import OperatorSettings, parse_settings


@dataclass
class PeeringsAppearing:
    """Answers ``missing_peerings`` with the places still lacking their object; one appears per poll if ``appearing``."""

    still_missing: list[str]
    appearing: bool = True
    created: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    polls: int = 0

    def ensure_peering(self, name: str, namespaces: tuple[str, ...]) -> None:
        self.created.append((name, namespaces))

    def missing_peerings(self, name: str, namespaces: tuple[str, ...]) -> list[str]:
        self.polls += 1
        missing = list(self.still_missing)
        if self.appearing:
            self.still_missing = self.still_missing[1:]
        return missing


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_by_default_the_operator_creates_the_peering_object() -> None:
    api = PeeringsAppearing(still_missing=["a"])
    prepare_peering(api, OperatorSettings(namespaces=("a",)))  # type: ignore[arg-type]
    assert api.created == [("icebergsync", ("a",))] and api.polls == 0


def test_told_not_to_create_it_the_operator_waits_until_every_object_exists() -> None:
    api, time = PeeringsAppearing(still_missing=["a", "b"]), FakeTime()
    settings = OperatorSettings(namespaces=("a", "b"), create_peering=False)
    prepare_peering(api, settings, timeout=60, clock=time.clock, sleep=time.sleep)  # type: ignore[arg-type]
    assert api.created == [] and api.polls == 3 and time.now == 2.0


def test_a_peering_object_that_never_appears_is_created_after_the_wait(caplog: pytest.LogCaptureFixture) -> None:
    """Deleted since the install, say: the operator must not crash-loop on it."""
    api, time = PeeringsAppearing(still_missing=["cluster-wide"], appearing=False), FakeTime()
    prepare_peering(api, OperatorSettings(create_peering=False), timeout=5, clock=time.clock,  # type: ignore[arg-type]
                    sleep=time.sleep)
    assert api.created == [("icebergsync", ())] and time.now == 5.0
    assert "'icebergsync' is still missing (cluster-wide) after 5 s: creating it" in caplog.text


def test_create_peering_flag_and_variable() -> None:
    assert parse_settings([], {})[0].create_peering is True
    assert parse_settings([], {"ICEBERGSYNC_CREATE_PEERING": "false"})[0].create_peering is False
    assert parse_settings(["--create-peering"], {"ICEBERGSYNC_CREATE_PEERING": "false"})[0].create_peering is True
    assert parse_settings(["--no-create-peering"], {})[0].create_peering is False
