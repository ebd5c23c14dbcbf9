"""Catalog reads in threads of their own: a stuck read is abandoned at its deadline, counted against its
namespace until it ends, backed off, and never delays another sync's read; an answer too large backs
off the same way; a read starts only with a slot, and one namespace cannot take them all."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from icebergsync_operator.catalog_reads import CatalogReads
from icebergsync_operator.settings import OperatorSettings
from icebergsync_operator.status_update import TableObservation

FAST = OperatorSettings(catalog_timeout=0.5, backoff_base=60, backoff_cap=60, max_stuck_catalog_reads=2)
URI = "http://tarpit.example:8181"
GOOD = TableObservation()


class Stuck:
    """A read that ignores its deadline until released (as a DNS lookup or a native client might)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def __call__(self) -> TableObservation:
        self.calls += 1
        assert self.release.wait(60), "never released"
        return GOOD


def wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_stuck_read_is_abandoned_with_a_timeout_and_counted_until_its_thread_ends() -> None:
    reads, stuck = CatalogReads(FAST), Stuck()
    observation = asyncio.run(reads.read(("team-a", "trips"), URI, stuck))
    assert observation == TableObservation(error=f"catalog at {URI} did not answer within 0.5s", timed_out=True)
    assert reads.stuck("team-a") == 1
    stuck.release.set()
    wait_until("the abandoned read to end", lambda: reads.stuck("team-a") == 0)


def test_a_timed_out_read_is_retried_only_after_its_backoff() -> None:
    reads, stuck = CatalogReads(FAST), Stuck()

    async def twice() -> tuple[TableObservation, TableObservation]:
        return await reads.read(("team-a", "trips"), URI, stuck), await reads.read(("team-a", "trips"), URI, stuck)

    first, second = asyncio.run(twice())
    assert first == second and first.timed_out
    assert stuck.calls == 1  # the second reconcile kept the observation and did not start a read
    stuck.release.set()
    reads.forget(("team-a", "trips"))
    assert asyncio.run(reads.read(("team-a", "trips"), URI, stuck)) == GOOD


def test_a_namespace_at_its_cap_of_stuck_reads_starts_no_more_and_other_namespaces_are_unaffected() -> None:
    reads, stuck = CatalogReads(FAST), Stuck()

    async def scenario() -> list[TableObservation]:
        first = await asyncio.gather(*(reads.read(("team-a", f"s{i}"), URI, stuck) for i in range(2)))
        refused = await reads.read(("team-a", "s2"), URI, stuck)
        other = await reads.read(("team-b", "fine"), URI, lambda: GOOD)
        return [*first, refused, other]

    *abandoned, refused, other = asyncio.run(scenario())
    assert all(observation.timed_out for observation in abandoned)
    assert refused.error == ("2 earlier catalog reads in namespace team-a are still stuck; no new read starts until "
                             "one ends")
    assert stuck.calls == 2 and reads.stuck("team-a") == 2
    assert other == GOOD
    stuck.release.set()
    wait_until("the abandoned reads to end", lambda: reads.stuck("team-a") == 0)


def test_thirty_stuck_reads_do_not_delay_another_syncs_read() -> None:
    reads = CatalogReads(OperatorSettings(catalog_timeout=30, max_stuck_catalog_reads=30, max_catalog_reads=31,
                                          max_namespace_catalog_reads=30))
    stuck = Stuck()

    async def scenario() -> tuple[TableObservation, list[bool]]:
        tarpits = [asyncio.create_task(reads.read(("team-a", f"s{i}"), URI, stuck)) for i in range(30)]
        await asyncio.sleep(0.2)
        good = await reads.read(("team-b", "fine"), URI, lambda: GOOD)
        pending = [not task.done() for task in tarpits]
        stuck.release.set()
        await asyncio.gather(*tarpits)
        return good, pending

    good, pending = asyncio.run(scenario())
    assert good == GOOD
    assert all(pending) and len(pending) == 30  # the good read finished while all thirty were still stuck


def test_an_error_of_the_read_itself_reaches_the_reconcile() -> None:
    def broken() -> TableObservation:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        asyncio.run(CatalogReads(FAST).read(("team-a", "trips"), URI, broken))


def test_an_answer_too_large_is_retried_only_after_its_backoff_as_a_timeout_is() -> None:
    reads, calls = CatalogReads(FAST), []
    bomb = TableObservation(error=f"catalog at {URI} sent a response larger than 1048576 bytes", too_large=True)

    def read() -> TableObservation:
        calls.append(1)
        return bomb

    async def twice() -> tuple[TableObservation, TableObservation]:
        return await reads.read(("team-a", "bomb"), URI, read), await reads.read(("team-a", "bomb"), URI, read)

    assert asyncio.run(twice()) == (bomb, bomb)
    assert len(calls) == 1


def test_a_namespace_at_its_cap_of_reads_in_flight_waits_then_is_deferred_and_others_still_read() -> None:
    settings = OperatorSettings(catalog_timeout=0.5, backoff_base=60, backoff_cap=60, max_stuck_catalog_reads=4,
                                max_catalog_reads=3, max_namespace_catalog_reads=2)
    reads, stuck = CatalogReads(settings), Stuck()

    async def scenario() -> tuple[TableObservation, TableObservation, TableObservation]:
        holders = [asyncio.create_task(reads.read(("team-a", f"s{i}"), URI, stuck)) for i in range(2)]
        await asyncio.sleep(0.1)
        assert reads.in_flight("team-a") == 2
        deferred = await reads.read(("team-a", "s2"), URI, lambda: GOOD)
        other = await reads.read(("team-b", "fine"), URI, lambda: GOOD)
        again = await reads.read(("team-a", "s2"), URI, lambda: GOOD)  # within its backoff
        await asyncio.gather(*holders)
        return deferred, other, again

    deferred, other, again = asyncio.run(scenario())
    assert deferred.timed_out and deferred.error is not None
    assert deferred.error.startswith("no catalog read could start within 0.5s: 2 reads of namespace team-a")
    assert other == GOOD and again == deferred
    stuck.release.set()
    wait_until("the slots to come free", lambda: reads.in_flight() == 0)
