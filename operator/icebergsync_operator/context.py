"""What every handler of the operator shares (the sync handlers' and the catalog handlers')."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from icebergsync_operator.catalog_reads import CatalogReads
from icebergsync_operator.kube import KubeApi
from icebergsync_operator.liveness import ReconcileWatch
from icebergsync_operator.settings import OperatorSettings


@dataclass
class OperatorContext:
    """What the handlers share: the API, the settings, the catalog reads, the liveness watch, a lock per sync."""

    api: KubeApi
    settings: OperatorSettings
    catalog_reads: CatalogReads = field(init=False)
    watch: ReconcileWatch = field(init=False)
    _locks: defaultdict[tuple[str, str], asyncio.Lock] = field(default_factory=lambda: defaultdict(asyncio.Lock))

    def __post_init__(self) -> None:
        self.catalog_reads = CatalogReads(self.settings)
        self.watch = ReconcileWatch(self.settings.reconcile_stuck_after)

    @asynccontextmanager
    async def lock(self, namespace: str, name: str) -> AsyncIterator[None]:
        async with self._locks[(namespace, name)]:
            yield
