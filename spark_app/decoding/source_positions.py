"""A Debezium event's place in the source, comparable across a topic's partitions.

PostgreSQL: the change's ``lsn``. A truncate takes an ACCESS EXCLUSIVE lock, so every other transaction that
changed the table logged its changes before the truncate's LSN or after its commit: comparing LSNs puts each
change before or after the truncate as the database applied them. MySQL and MariaDB: the binlog ``file`` (its
sequence number), ``pos`` and ``row`` (the binlog is in commit order). Other connectors: no position.
"""

from __future__ import annotations

import json
import re
from typing import Any

Position = tuple[int, ...]
TRUNCATED_NOTE = "truncated-at"  # the source note of the commit that emptied the table at a truncate: its position
_FILE_NUMBER = re.compile(r"\.(\d+)$")


def source_position(envelope: Any) -> Position | None:
    """The place of a (parsed, unwrapped) Debezium event in its source, or None when its ``source`` names none."""
    source = envelope.get("source") if isinstance(envelope, dict) else None
    if not isinstance(source, dict):
        return None
    lsn = source.get("lsn")
    if type(lsn) is int:
        return (lsn,)
    file, pos = source.get("file"), source.get("pos")
    match = _FILE_NUMBER.search(file) if isinstance(file, str) else None
    if match is not None and type(pos) is int:
        row = source.get("row")
        return (int(match.group(1)), pos, row if type(row) is int else 0)
    return None


def encode(position: Position) -> str:
    """A position as a snapshot property value."""
    return json.dumps(list(position))


def decode(text: str | None) -> Position | None:
    """A position from a snapshot property value (None: absent or not one)."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return tuple(value) if isinstance(value, list) and value and all(type(v) is int for v in value) else None
