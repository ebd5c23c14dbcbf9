"""Tables without a primary key (an empty key): decoding Debezium events into whole rows, the multiset collapse,
routing by the whole row, and the spec's rules (spark_app/staging/keyless_collapse.py, spark_app/decoding/row_identity.py, docs/connectors.md)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from icebergsync.errors import SpecError
from icebergsync.spec import (
    KEYLESS_NEEDS_CHANGES_MESSAGE,
    KEYLESS_NEEDS_DEBEZIUM_MESSAGE,
    KEYLESS_NEEDS_POSITION_MESSAGE,
    Column,
    parse_spec,
)
from spark_app.decoding.changes import OP_COLUMN, OP_DELETE, OP_UPSERT, UNAVAILABLE, decode_changes
from spark_app.decoding.deadletter import ERROR_COLUMN
from spark_app.decoding.row_identity import COUNT_COLUMN, row_identities
from spark_app.staging.keyless_collapse import collapse_copies
from spark_app.staging.pipeline import KeyRouter

COLUMNS = [Column(name="name", type="string"), Column(name="qty", type="int"), Column(name="price", type="double"),
           Column(name="tags", type="array<string>")]
NAMES = [column.name for column in COLUMNS]


def decode(*events: dict[str, Any]) -> pa.Table:
    return decode_changes([json.dumps(e).encode() for e in events], None, lambda i: {"file": "f", "line": i + 1},
                          COLUMNS, [], "debezium", 0)


def event(op: str, before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"before": before, "after": after, "op": op, "source": {"lsn": 1}}


def row(name: str | None, qty: int | None = None, price: float | None = None,
        tags: list[str | None] | None = None) -> dict[str, Any]:
    return {"name": name, "qty": qty, "price": price, "tags": tags}


def as_rows(table: pa.Table) -> Counter[tuple[Any, ...]]:
    """The multiset of a table's rows (NaN as a string, arrays as tuples: hashable, NaN equal)."""
    def value(v: Any) -> Any:
        return tuple(v) if isinstance(v, list) else "nan" if isinstance(v, float) and v != v else v
    return Counter(tuple(value(v) for v in r.values()) for r in table.select(NAMES).to_pylist())


def test_a_delete_carries_the_whole_before_row_and_an_update_is_a_delete_and_an_insert() -> None:
    changes = decode(event("c", after=row("a", 1)), event("d", before=row("a", None, 2.5, ["x", None])),
                     event("u", before=row(None), after=row("b", 3)))
    assert changes.column(ERROR_COLUMN).null_count == changes.num_rows
    assert changes.column(OP_COLUMN).to_pylist() == [OP_UPSERT, OP_DELETE, OP_DELETE, OP_UPSERT]
    assert changes.select(NAMES).to_pylist() == [row("a", 1), row("a", None, 2.5, ["x", None]), row(None), row("b", 3)]


@pytest.mark.parametrize("bad, reason", [
    (event("u", after=row("a")), "op u without before: on a table without a primary key a change removes the row "
                                 "equal to its before image: set REPLICA IDENTITY FULL"),
    (event("d"), "op d without before"),
    (event("u", before=row(UNAVAILABLE), after=row("a")), f"before: Debezium did not send the value of name ({UNAVAILABLE})"),
    (event("u", before=row("a"), after=row(UNAVAILABLE)), f"after: Debezium did not send the value of name ({UNAVAILABLE})"),
    (event("c", after=row("a", tags=[UNAVAILABLE])), "after: Debezium did not send the value of tags"),
])
def test_an_incomplete_before_or_after_is_a_dead_letter_naming_the_fix(bad: dict[str, Any], reason: str) -> None:
    changes = decode(event("c", after=row("ok")), bad)
    errors = changes.column(ERROR_COLUMN).to_pylist()
    assert errors[0] is None and errors[1] is not None and errors[1].startswith(reason), errors
    assert len(errors) == 2  # the whole event is one dead letter: neither half is applied


def collapsed(*events: dict[str, Any]) -> tuple[Counter[tuple[Any, ...]], dict[tuple[Any, ...], int]]:
    inserts, removed = collapse_copies(decode(*events))
    counts = removed.column(COUNT_COLUMN).to_pylist()
    return as_rows(inserts), {next(iter(as_rows(removed.slice(i, 1)))): n for i, n in enumerate(counts)}


def test_duplicates_stay_duplicates_and_one_copy_is_removed_per_delete() -> None:
    inserts, removed = collapsed(event("c", after=row("a", 1)), event("c", after=row("a", 1)),
                                 event("c", after=row("a", 1)), event("d", before=row("a", 1)))
    assert inserts == Counter({("a", 1, None, None): 2}) and removed == {}
    inserts, removed = collapsed(event("d", before=row("a", 1)), event("d", before=row("a", 1)),
                                 event("u", before=row("b", None, -0.0), after=row("c")))
    assert inserts == Counter({("c", None, None, None): 1})
    assert removed == {("a", 1, None, None): 2, ("b", None, -0.0, None): 1}


def test_nulls_equal_nulls_and_an_insert_and_delete_in_one_trigger_cancel() -> None:
    inserts, removed = collapsed(event("c", after=row(None, None, None, [None])), event("d", before=row(None, None, None, [None])),
                                 event("c", after=row(None)), event("d", before=row(None, 0)))
    assert inserts == Counter({(None, None, None, None): 1})
    assert removed == {(None, 0, None, None): 1}  # 0 is not null


def test_an_update_of_one_copy_and_more_deletes_than_inserts() -> None:
    inserts, removed = collapsed(event("c", after=row("a", 1)), event("u", before=row("a", 1), after=row("a", 2)),
                                 event("d", before=row("a", 2)), event("d", before=row("a", 2)),
                                 event("u", before=row("x"), after=row("x")))
    assert inserts == Counter()  # a row updated to itself: one copy out, one in
    assert removed == {("a", 2, None, None): 1}  # the trigger's own a/2 cancels one delete; the other takes a live copy


def test_floats_are_the_same_row_by_their_bits() -> None:
    rows = pa.table({"f": pa.array([0.0, -0.0, float("nan"), float("nan"), None, 0.0])})
    identities = row_identities(rows, ["f"])
    assert identities[2] == identities[3] and identities[0] == identities[5]
    assert len({identities[0], identities[1], identities[2], identities[4]}) == 4


def test_every_change_of_a_row_is_routed_to_one_bucket() -> None:
    changes = decode(*[event("c", after=row(f"n{i % 7}", i % 3, None if i % 2 else 1.5, None if i % 5 else ["t"]))
                       for i in range(60)])
    buckets: dict[tuple[Any, ...], set[int]] = {}
    for bucket, part in KeyRouter((), 4).split(changes.to_batches()[0]):
        for r in as_rows(part):
            buckets.setdefault(r, set()).add(bucket)
    assert len(buckets) > 4 and all(len(b) == 1 for b in buckets.values())
    assert len({b for bs in buckets.values() for b in bs}) > 1


def spec(key: list[str], **changes: Any) -> dict[str, Any]:
    return {"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "metadata": {"name": "s"},
            "spec": {"source": {"files": {"path": "s3://b/changes/", "format": "json"}},
                     "schema": [{"name": "name", "type": "string"}],
                     "table": {"catalog": {"type": "sql", "uri": "sqlite:///c.db", "warehouse": "s3://b/w"},
                               "name": "shop.items", "key": key},
                     **({"changes": changes} if changes else {})}}


def problems(document: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as raised:
        parse_spec(document)
    return raised.value.problems


def test_an_empty_key_declares_a_keyless_table_with_debezium_and_position_deletes_only() -> None:
    sync = parse_spec(spec([], format="debezium"))
    assert sync.spec.table_settings("shop.items").keyless and sync.spec.keyless_stream("any-topic")
    assert not sync.spec.model_copy(update={"changes": None}).keyless_stream("any-topic")
    assert problems(spec([], format="upsert")) == [f"spec.table.key: {KEYLESS_NEEDS_DEBEZIUM_MESSAGE}"]
    assert problems(spec([], format="debezium", deletes="equality")) == [f"spec.table.key: {KEYLESS_NEEDS_POSITION_MESSAGE}"]
    assert problems(spec([])) == [f"spec.table.key: {KEYLESS_NEEDS_CHANGES_MESSAGE}"]
