"""Primary-key updates that leave a TOASTed value unchanged: the new key's unsent values come from the old key.

Under ``REPLICA IDENTITY DEFAULT`` PostgreSQL logs such an UPDATE with the old key alone and the new row without
its unchanged TOASTed values; Debezium sends a delete of the old key and a create of the new key holding the
placeholder, both with the update's ``source`` (its LSN and txId). Decoding tags both with that source event
(``_isync_move``), the trigger's collapse hands the driver its winning deletes so tagged (``moved``), and here a
carried create whose tag names one takes its unsent values from the old key: the old key's values in the trigger
when an earlier change there has them all, else its live row on the head the commit swaps against (the
delete of the same trigger removes that row in the same snapshot); a key moved twice in the trigger takes them
along the chain. Both halves must be in one trigger: ``spec.changes.transactions`` keeps them so (a source
transaction is never split), otherwise a create whose delete is in another trigger is a dead letter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_app.decoding.changes import CARRY_COLUMN, HAS_VALUES_COLUMN, MOVE_COLUMN, VIA_COLUMN


def matching_moves(carried: pa.Table, moved: pa.Table | None) -> pa.Table | None:
    """The rows of ``moved`` a row of ``carried`` draws on: the one of its source event, and those it leads to
    (``_isync_via``: a key moved twice in the trigger); None: none."""
    if moved is None or moved.num_rows == 0 or MOVE_COLUMN not in carried.column_names:
        return None
    links = dict(zip(moved.column(MOVE_COLUMN).to_pylist(), moved.column(VIA_COLUMN).to_pylist(), strict=True))
    named: set[str] = set()
    for event in carried.column(MOVE_COLUMN).to_pylist():
        while event is not None and event in links and event not in named:
            named.add(event)
            event = links[event]
    matching = moved.filter(pa.array([event in named for event in moved.column(MOVE_COLUMN).to_pylist()]))
    return matching if matching.num_rows else None


def old_keys_to_read(moves: pa.Table | None, key: Sequence[str]) -> pa.Table | None:
    """The old keys whose values are not in the trigger: read from their live rows."""
    if moves is None:
        return None
    lacking = moves.filter(pa.array([not has and via is None for has, via in zip(
        moves.column(HAS_VALUES_COLUMN).to_pylist(), moves.column(VIA_COLUMN).to_pylist(), strict=True)]))
    return lacking.select(list(key)) if lacking.num_rows else None


def _source(event: str | None, by_event: dict[str, dict[str, Any]], live_rows: dict[tuple[Any, ...], dict[str, Any]],
            key: Sequence[str]) -> dict[str, Any] | None:
    """The values a create of source event ``event`` takes: the old key's in the trigger, its live row's, or (moved
    twice) those of the key it was moved from."""
    seen: set[str] = set()
    while event is not None and event in by_event and event not in seen:
        seen.add(event)
        move = by_event[event]
        if move[HAS_VALUES_COLUMN]:
            return move
        if move[VIA_COLUMN] is None:
            return live_rows.get(tuple(move[name] for name in key))
        event = move[VIA_COLUMN]
    return None


def fill_from_moves(carried: pa.Table, moves: pa.Table | None, live: pa.Table,
                    key: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """(the rows of ``carried`` completed from their old keys, the other rows). ``live`` holds the live rows (key
    and carried columns) of the old keys :func:`old_keys_to_read` named; an old key without one completes nothing."""
    if moves is None:
        return carried.slice(0, 0), carried
    by_event = {row[MOVE_COLUMN]: row for row in moves.to_pylist()}
    live_rows = {tuple(row[name] for name in key): row for row in live.to_pylist()}
    sources = [_source(event, by_event, live_rows, key) for event in carried.column(MOVE_COLUMN).to_pylist()]
    found = pa.array([source is not None for source in sources])
    completed, rest = carried.filter(found), carried.filter(pc.invert(found))
    values_of = [source for source in sources if source is not None]
    carries = completed.column(CARRY_COLUMN).to_pylist()
    for name in sorted({name for names in carries if names for name in names}):
        position = completed.column_names.index(name)
        values = [source[name] if name in (names or ()) else value
                  for source, names, value in zip(values_of, carries, completed.column(name).to_pylist(), strict=True)]
        completed = completed.set_column(position, completed.schema.field(name),
                                         pa.array(values, completed.schema.field(name).type))
    done = pa.nulls(completed.num_rows, completed.schema.field(CARRY_COLUMN).type)
    return completed.set_column(completed.column_names.index(CARRY_COLUMN), CARRY_COLUMN, done), rest
