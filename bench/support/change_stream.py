"""The keyed benchmarks' change stream: Debezium-style JSON-lines files of one customers table from a seed,
the model of the rows they leave (key -> (name, updated_at in microseconds)), and a table's rows to compare with it."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

START = datetime(2025, 3, 1, tzinfo=UTC)
ZONES = [UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-7))]
SCHEMA = [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"},
          {"name": "updated_at", "type": "timestamptz"}]

Row = tuple[str, int]


def micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def change_files(directory: Path, keys: int, changes: int, batch: int, seed: int = 13) -> tuple[list[Path], dict[int, Row]]:
    """Write the stream as JSON-lines files (a snapshot, then ``changes`` in batches); returns them and the model."""
    rng = random.Random(seed)
    model: dict[int, Row] = {}
    lsn = 0

    def row(key: int) -> tuple[dict[str, Any], Row]:
        moment = START + timedelta(days=rng.randrange(14), seconds=rng.randrange(86_400),
                                   microseconds=rng.randrange(1_000_000))
        name = f"customer {key} v{rng.randrange(10**6)}"
        return ({"id": key, "name": name, "updated_at": moment.astimezone(rng.choice(ZONES)).isoformat()},
                (name, micros(moment)))

    def event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
        nonlocal lsn
        lsn += 1
        return json.dumps({"before": before, "after": after, "op": op, "ts_ms": lsn, "source": {"lsn": lsn}})

    files = []
    lines = []
    for key in range(keys):
        after, model[key] = row(key)
        lines.append(event("r", None, after))
    files.append(directory / "00000-snapshot.json")
    files[-1].write_text("\n".join(lines) + "\n")
    live = list(model)
    for number in range(1, -(-changes // batch) + 1):
        lines = []
        for _ in range(min(batch, changes - (number - 1) * batch)):
            roll = rng.random()
            if roll < 0.6 and live:  # an update, nearly always to another day
                key = rng.choice(live)
                after, model[key] = row(key)
                lines.append(event("u", {"id": key, "name": None, "updated_at": None}, after))
            elif roll < 0.8 and live:
                slot = rng.randrange(len(live))
                key = live[slot]
                live[slot] = live[-1]
                live.pop()
                del model[key]
                lines.append(event("d", {"id": key, "name": None, "updated_at": None}, None))
            else:  # an insert: a deleted key comes back, or an upsert of a live one
                key = rng.randrange(keys)
                if key not in model:
                    live.append(key)
                after, model[key] = row(key)
                lines.append(event("c", None, after))
        files.append(directory / f"{number:05d}.json")
        files[-1].write_text("\n".join(lines) + "\n")
    return files, model


def table_rows(spark: Any, frame: Any) -> dict[int, Row]:
    rows = frame.selectExpr("id", "name", "unix_micros(updated_at) AS micros").collect()
    assert len(rows) == len({r["id"] for r in rows}), "a key is in the table twice"
    return {r["id"]: (r["name"], r["micros"]) for r in rows}
