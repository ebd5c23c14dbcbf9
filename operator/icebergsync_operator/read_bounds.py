"""What bounds one catalog read: its deadline, the endpoints and files its scope allows, its share of memory."""

from __future__ import annotations

from dataclasses import dataclass

from icebergsync_operator.catalog_memory import MemoryShare
from icebergsync_operator.catalog_scope import CatalogScope
from icebergsync_operator.deadline import Deadline


@dataclass(frozen=True)
class ReadBounds:
    """Handed to every step of one read (connections, requests, queries, files)."""

    deadline: Deadline
    scope: CatalogScope
    memory: MemoryShare
