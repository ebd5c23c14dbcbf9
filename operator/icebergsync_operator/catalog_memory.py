"""The operator's memory for catalog reads: one budget shared by every read in flight.

A body (a catalog's answer, a metadata file) is buffered as it arrives, then copied, decoded and
parsed into Python objects that take far more memory than the body: a snapshot-heavy metadata file
parses into up to 30 times its size (measured with pyiceberg 0.12). So every decompressed byte a
read buffers is charged ``BYTES_CHARGED`` bytes against ``--catalog-read-memory``. A read handles
one body at a time, but the previous one's parse may still be alive while the next arrives, so a
read holds the charge of its last two bodies until it ends.

A read that would go over the budget fails at once with ``TooLarge`` (no read waits while holding
memory another needs), and its sync backs off as after a timeout. The first ``SMALL_READ`` bytes of
every read are not charged to the shared pool but to a reserve sized for ``--max-catalog-reads``
reads, so a read of small answers never fails for want of memory, whatever other reads hold.
"""

from __future__ import annotations

import threading

BYTES_CHARGED = 32  #: memory charged per buffered byte: the body, its copy, its text and its parse (<= 30x)
SMALL_READ = 64 * 1024  #: body bytes of every read covered by the reserve


class TooLarge(Exception):
    """An answer the operator will not hold (over the size cap or the memory budget); the message is safe."""


class MemoryBudget:
    """The memory all catalog reads in flight may take; thread-safe, one per operator."""

    def __init__(self, total: int, max_reads: int):
        self.total = total
        self.reserve = max_reads * SMALL_READ * BYTES_CHARGED
        self._taken = 0  #: charged to the shared pool (the total less the reserve)
        self._lock = threading.Lock()

    @property
    def taken(self) -> int:
        """Bytes charged to the shared pool now."""
        with self._lock:
            return self._taken

    def _take(self, amount: int) -> bool:
        with self._lock:
            if self._taken + amount > self.total - self.reserve:
                return False
            self._taken += amount
            return True

    def _give_back(self, amount: int) -> None:
        with self._lock:
            self._taken -= amount

    def share(self, body_limit: int) -> MemoryShare:
        """A new read's share, with bodies capped at ``body_limit`` bytes (after decompression)."""
        return MemoryShare(self, body_limit)


class MemoryShare:
    """One read's share of the budget: ``start_body`` for each body, ``charge`` as it grows, ``release`` at the end."""

    def __init__(self, budget: MemoryBudget, body_limit: int):
        self.budget = budget
        self.body_limit = body_limit
        self._live: list[int] = []  #: buffered bytes of the bodies still charged (at most two)
        self._charged = 0

    def _settle(self, live: list[int]) -> None:
        target = max(sum(live) - SMALL_READ, 0) * BYTES_CHARGED
        if target > self._charged:
            if not self.budget._take(target - self._charged):
                raise TooLarge(f"sent more than the operator's memory for catalog reads can hold now "
                               f"({self.budget.total} bytes for all reads in flight)")
        elif target < self._charged:
            self.budget._give_back(self._charged - target)
        self._charged, self._live = target, live

    def start_body(self) -> None:
        """A new body begins: the one before the previous is no longer charged."""
        self._settle([*self._live[-1:], 0])

    def charge(self, size: int) -> None:
        """``size`` more bytes of the current body; ``TooLarge`` if the budget cannot hold them."""
        self._settle([*self._live[:-1], self._live[-1] + size])

    def release(self) -> None:
        """The read ended: give everything back."""
        self._settle([])
