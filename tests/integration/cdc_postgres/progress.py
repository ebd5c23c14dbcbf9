"""Following a CDC sync's progress: Debezium's writes to Kafka, the sink's frontier, its dead letters."""

from __future__ import annotations

import json
import time
from typing import Any

from pyiceberg.exceptions import NoSuchTableError

from icebergsync.spec import parse_spec
from tests.infra.services import KafkaBroker
from tests.integration.sync_support import catalog_of, sink_commits


def sink_id(document: dict[str, Any]) -> str:
    return f"{document['metadata']['namespace']}/{document['metadata']['name']}"


def message_key(record_key: bytes | None) -> Any:
    parsed = json.loads(record_key or b"null")
    return parsed["payload"] if isinstance(parsed, dict) and set(parsed) == {"schema", "payload"} else parsed


def wait_for_key(broker: KafkaBroker, topic: str, key: dict[str, Any], timeout: float = 120) -> None:
    """Until Debezium has written a change of ``key`` (the workload's last) to ``topic``: then every earlier
    change of that table is there too (the runner flushes each batch before the next)."""
    deadline = time.monotonic() + timeout
    while not any(message_key(record.key) == key for record in broker.consume(topic, timeout=10)):
        assert time.monotonic() < deadline, f"Debezium never wrote the change of {key} to {topic}"
        time.sleep(1)


def caught_up(document: dict[str, Any], broker: KafkaBroker, topic: str, table: str | None = None) -> bool:
    """Whether the sink's last commit to ``table`` (by default the sync's one table) covers all of ``topic``."""
    iceberg = catalog_of(parse_spec(document)).load_table(table or document["spec"]["table"]["name"])
    commits = sink_commits(iceberg, sink_id(document))
    frontier = (commits[-1].frontier or {}).get(topic, {}) if commits else {}
    return all(int(frontier.get(str(p), 0)) == end for p, end in broker.end_offsets(topic).items())


def dead_letters(document: dict[str, Any], table: str | None = None) -> list[dict[str, Any]]:
    """The rows of the dead-letter table ``table`` (by default the sync's one), none when it does not exist."""
    try:
        iceberg = catalog_of(parse_spec(document)).load_table(table or document["spec"]["deadLetter"]["table"])
    except NoSuchTableError:
        return []
    return iceberg.scan().to_arrow().to_pylist()
