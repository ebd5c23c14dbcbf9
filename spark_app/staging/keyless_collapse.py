"""A trigger's changes to a keyless table, as a multiset: per distinct row, the copies it adds or removes."""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa

from spark_app.decoding.changes import OP_COLUMN, OP_UPSERT, declared_columns, valid_changes
from spark_app.decoding.row_identity import COUNT_COLUMN, Identity, row_identities


class Copies(NamedTuple):
    """What a trigger's changes (of one row bucket) to a keyless table come to."""

    inserts: pa.Table  # rows to append, one per copy (declared columns)
    removed: pa.Table  # distinct rows whose live copies go: declared columns and how many (COUNT_COLUMN)


def collapse_copies(changes: pa.Table) -> Copies:
    """Per distinct row (every declared column, nulls equal), net = inserts - deletes of the trigger: ``net`` copies
    to append when positive, ``-net`` live copies to remove when negative. Dead letters are ignored; the order of the
    changes does not matter (a source never removes a row that is not there), so an update of one copy of a
    duplicated row removes one copy of the old row and adds one of the new."""
    changes = valid_changes(changes)
    declared = declared_columns(changes)
    rows = changes.select(declared)
    net: dict[Identity, int] = {}
    first: dict[Identity, int] = {}
    for index, (identity, op) in enumerate(zip(row_identities(rows, declared),
                                               changes.column(OP_COLUMN).to_pylist(), strict=True)):
        first.setdefault(identity, index)
        net[identity] = net.get(identity, 0) + (1 if op == OP_UPSERT else -1)
    inserts = [first[identity] for identity, count in net.items() for _ in range(count)]
    removed = [(first[identity], -count) for identity, count in net.items() if count < 0]
    return Copies(rows.take(pa.array(inserts, pa.int64())),
                  rows.take(pa.array([index for index, _ in removed], pa.int64()))
                  .append_column(COUNT_COLUMN, pa.array([count for _, count in removed], pa.int64())))
