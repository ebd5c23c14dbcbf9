"""Each catalog read in a thread of its own, awaited with a deadline: a stuck catalog holds up nobody else.

Why not a pool: any pool shared by all syncs (kopf's executor, asyncio's default one) is emptied by
as many stuck reads as it has threads, and every other sync's status then waits behind them. So a
reconcile awaits its catalog read on the event loop, and the read runs in a new thread that only
it uses. The read's own ``Deadline`` cuts its sockets at ``--catalog-timeout``, so the thread
normally ends right then; one still running ``ABANDON_AFTER`` seconds later (stuck where no socket
can be cut: a DNS lookup, a native S3 client) is abandoned, the sync reports the timeout, and the
thread is counted against its namespace until it ends. A namespace with
``--max-stuck-catalog-reads`` such threads gets no new read started until one ends, which bounds
the threads a tenant can pin.

A read starts only with a slot: at most ``--max-catalog-reads`` reads in flight (running or stuck)
in all and ``--max-namespace-catalog-reads`` for one namespace, so the threads, and the memory the
reads' ``MemoryBudget`` reserves for each, stay bounded, and no namespace takes every slot. A read
waits up to ``--catalog-timeout`` for one, on the event loop; after that it is deferred.

A read that timed out, hit the size cap or the memory budget, or found no slot, is tried again only
after a backoff (``--backoff-base`` doubled per consecutive failure, at most ``--backoff-cap``): a
tarpit or a gzip bomb costs one read per backoff period, not one per status refresh. Until then the
sync keeps its last observation.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from icebergsync_operator.catalog_access import timed_out
from icebergsync_operator.catalog_memory import MemoryBudget
from icebergsync_operator.settings import OperatorSettings
from icebergsync_operator.status_update import TableObservation

ABANDON_AFTER = 2.0  #: seconds past the deadline before a read's thread is given up on
SLOT_POLL = 0.05  #: seconds between two looks for a free read slot

Key = tuple[str, str]  #: namespace, name


@dataclass
class _Flight:
    finished: bool = False
    abandoned: bool = False


def _settle(done: asyncio.Future[TableObservation], outcome: TableObservation | Exception) -> None:
    if done.cancelled():  # the reconcile itself was cancelled (the operator stops)
        return
    if isinstance(outcome, Exception):
        done.set_exception(outcome)
    else:
        done.set_result(outcome)


@dataclass
class _Backoff:
    failures: int
    retry_at: float
    observation: TableObservation


@dataclass
class CatalogReads:
    """Runs catalog reads for the operator's reconciles; one instance per operator."""

    settings: OperatorSettings
    memory: MemoryBudget = field(init=False)  #: what every read's bodies are charged to
    _stuck: Counter[str] = field(default_factory=Counter)  #: namespace -> abandoned reads still running
    _in_flight: Counter[str] = field(default_factory=Counter)  #: namespace -> reads whose thread runs
    _backoff: dict[Key, _Backoff] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.memory = MemoryBudget(self.settings.catalog_read_memory, self.settings.max_catalog_reads)

    def stuck(self, namespace: str) -> int:
        """Abandoned reads of ``namespace`` whose threads have not ended yet."""
        with self._lock:
            return self._stuck[namespace]

    def in_flight(self, namespace: str | None = None) -> int:
        """Reads whose threads run (stuck ones included): of ``namespace``, or in all."""
        with self._lock:
            return self._in_flight[namespace] if namespace is not None else self._in_flight.total()

    async def read(self, key: Key, uri: str, read: Callable[[], TableObservation]) -> TableObservation:
        """The observation ``read`` returns, or a timeout one; never waits past twice the deadline and a grace."""
        held = self._backoff.get(key)
        if held is not None and time.monotonic() < held.retry_at:
            return held.observation
        namespace = key[0]
        if self.stuck(namespace) >= self.settings.max_stuck_catalog_reads:
            return TableObservation(error=f"{self.stuck(namespace)} earlier catalog reads in namespace {namespace} "
                                          "are still stuck; no new read starts until one ends", timed_out=True)
        if await self._slot(namespace):
            observation = await self._run(namespace, uri, read)
        else:
            observation = TableObservation(
                error=f"no catalog read could start within {self.settings.catalog_timeout:g}s: "
                      f"{self.in_flight(namespace)} reads of namespace {namespace} and {self.in_flight()} in all "
                      f"are in flight (--max-namespace-catalog-reads {self.settings.max_namespace_catalog_reads}, "
                      f"--max-catalog-reads {self.settings.max_catalog_reads})", timed_out=True)
        self._remember(key, observation)
        return observation

    def _take_slot(self, namespace: str) -> bool:
        with self._lock:
            if (self._in_flight.total() >= self.settings.max_catalog_reads
                    or self._in_flight[namespace] >= self.settings.max_namespace_catalog_reads):
                return False
            self._in_flight[namespace] += 1
            return True

    def _free_slot(self, namespace: str) -> None:
        with self._lock:
            self._in_flight[namespace] -= 1

    async def _slot(self, namespace: str) -> bool:
        """Take a read slot for ``namespace``, waiting up to ``--catalog-timeout``; False when none came free."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.settings.catalog_timeout
        while not self._take_slot(namespace):
            if loop.time() >= give_up:
                return False
            await asyncio.sleep(SLOT_POLL)
        return True

    async def _run(self, namespace: str, uri: str, read: Callable[[], TableObservation]) -> TableObservation:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[TableObservation] = loop.create_future()
        flight = _Flight()

        def run() -> None:
            outcome: TableObservation | Exception
            try:
                outcome = read()
            except Exception as error:  # handed to the awaiting reconcile, as an awaited call would raise it
                outcome = error
            finally:
                self._free_slot(namespace)
            with self._lock:
                flight.finished = True
                if flight.abandoned:
                    self._stuck[namespace] -= 1
                    return
            with contextlib.suppress(RuntimeError):  # the loop is gone: the operator is stopping
                loop.call_soon_threadsafe(_settle, done, outcome)

        try:
            threading.Thread(target=run, name=f"catalog-read-{namespace}", daemon=True).start()
        except RuntimeError:  # no thread could be started: the slot taken for it is free again
            self._free_slot(namespace)
            raise
        try:
            return await asyncio.wait_for(asyncio.shield(done), self.settings.catalog_timeout + ABANDON_AFTER)
        except TimeoutError:
            with self._lock:
                flight.abandoned = not flight.finished
                if flight.abandoned:
                    self._stuck[namespace] += 1
            if not flight.abandoned:
                return await done
            return TableObservation(error=timed_out(uri, self.settings.catalog_timeout), timed_out=True)

    def _remember(self, key: Key, observation: TableObservation) -> None:
        if not observation.backs_off:
            self._backoff.pop(key, None)
            return
        failures = self._backoff[key].failures + 1 if key in self._backoff else 1
        retry_at = time.monotonic() + self.settings.retry_delay(failures)
        self._backoff[key] = _Backoff(failures, retry_at, observation)

    def forget(self, key: Key) -> None:
        """Drop a deleted sync's backoff."""
        self._backoff.pop(key, None)
