"""Change records without Spark: Debezium and upsert decoding, dead letters, and the collapse per key."""

from __future__ import annotations

import base64
import json
import random
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from icebergsync.spec import Column
from spark_app.decoding.changes import (
    CARRY_COLUMN,
    OP_COLUMN,
    OP_DELETE,
    OP_UPSERT,
    ORDER_COLUMN,
    changes_schema,
    collapse,
    decode_changes,
)
from spark_app.decoding.deadletter import ERROR_COLUMN, POSITION_COLUMN, RAW_COLUMN

COLUMNS = [
    Column(name="id", type="long", required=True),
    Column(name="name", type="string"),
    Column(name="updated_at", type="timestamptz"),
    Column(name="price", type="decimal(10,2)"),
    Column(name="born", type="date"),
    Column(name="local", type="timestamp"),
    Column(name="blob", type="binary"),
    Column(name="active", type="boolean"),
    Column(name="score", type="double"),
    Column(name="n", type="int"),
]
KEY = ["id"]


def at(index: int) -> dict[str, Any]:
    return {"file": "changes.jsonl", "line": index + 1}


def decode(records: list[Any], fmt: str = "debezium", keys: list[Any] | None = None, base: int = 0,
           columns: list[Column] = COLUMNS, key: list[str] = KEY) -> pa.Table:
    values = [r if r is None or isinstance(r, bytes) else (r if isinstance(r, str) else json.dumps(r)).encode()
              for r in records]
    encoded_keys = None if keys is None else [k if k is None or isinstance(k, bytes) else json.dumps(k).encode()
                                              for k in keys]
    return decode_changes(values, encoded_keys, at, columns, key, fmt, base)


def event(op: str, before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"before": before, "after": after, "op": op, "ts_ms": 1700000000000, "source": {"db": "shop", "lsn": 1}}


def good(table: pa.Table) -> list[dict[str, Any]]:
    assert table.column(ERROR_COLUMN).null_count == table.num_rows, table.column(ERROR_COLUMN).to_pylist()
    return table.select(["id", "name", OP_COLUMN, ORDER_COLUMN]).to_pylist()


def reasons(table: pa.Table) -> list[str | None]:
    return table.column(ERROR_COLUMN).to_pylist()


def test_debezium_ops_upsert_after_and_delete_the_key_of_before() -> None:
    table = decode([
        event("c", after={"id": 1, "name": "a"}),
        event("r", after={"id": 2, "name": "b"}),
        event("u", before={"id": 1, "name": "a"}, after={"id": 1, "name": "a2"}),
        event("d", before={"id": 2, "name": "b"}),
        None,  # the tombstone after a delete: not a change, not a dead letter
        "null",
    ], base=1000)
    assert table.schema == changes_schema(COLUMNS)
    assert good(table) == [
        {"id": 1, "name": "a", OP_COLUMN: OP_UPSERT, ORDER_COLUMN: 1000},
        {"id": 2, "name": "b", OP_COLUMN: OP_UPSERT, ORDER_COLUMN: 1001},
        {"id": 1, "name": "a2", OP_COLUMN: OP_UPSERT, ORDER_COLUMN: 1002},
        {"id": 2, "name": None, OP_COLUMN: OP_DELETE, ORDER_COLUMN: 1003},
    ]


def test_a_key_change_deletes_the_old_key_and_upserts_the_new_one() -> None:
    table = decode([event("u", before={"id": 1, "name": "a"}, after={"id": 7, "name": "a"})], base=5)
    assert good(table) == [
        {"id": 1, "name": None, OP_COLUMN: OP_DELETE, ORDER_COLUMN: 5},
        {"id": 7, "name": "a", OP_COLUMN: OP_UPSERT, ORDER_COLUMN: 5},
    ]
    inserts, deletes, _, _ = collapse(table, KEY)
    assert inserts.column("id").to_pylist() == [7] and deletes.column("id").to_pylist() == [1, 7]


def test_an_update_without_before_upserts() -> None:
    """Postgres with the default replica identity sends updates without before."""
    assert good(decode([event("u", after={"id": 3, "name": "x"})])) == [
        {"id": 3, "name": "x", OP_COLUMN: OP_UPSERT, ORDER_COLUMN: 0}]


def test_the_schema_payload_wrapping_is_unwrapped_and_its_logical_types_decide_units() -> None:
    row_schema = {"type": "struct", "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "field": "local"},
        {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "born"},
    ]}
    schema = {"type": "struct", "fields": [{**row_schema, "field": "before"}, {**row_schema, "field": "after"},
                                           {"type": "string", "field": "op"}]}
    micros = 1_700_000_000_123_456
    wrapped = {"schema": schema, "payload": event("c", after={"id": 1, "local": micros, "born": 19000})}
    millis_schema = json.loads(json.dumps(schema).replace("io.debezium.time.MicroTimestamp", "io.debezium.time.Timestamp"))
    wrapped_ms = {"schema": millis_schema, "payload": event("c", after={"id": 2, "local": micros // 1000})}
    nanos_schema = json.loads(json.dumps(schema).replace("MicroTimestamp", "NanoTimestamp"))
    wrapped_ns = {"schema": nanos_schema, "payload": event("c", after={"id": 3, "local": micros * 1000})}
    rounding = {"schema": nanos_schema, "payload": event("c", after={"id": 4, "local": micros * 1000 + 1})}
    tombstone = {"schema": None, "payload": None}
    table = decode([wrapped, wrapped_ms, wrapped_ns, rounding, tombstone])
    assert table.num_rows == 4
    assert table.column("local").to_pylist()[:3] == [
        datetime(2023, 11, 14, 22, 13, 20, 123456), datetime(2023, 11, 14, 22, 13, 20, 123000),
        datetime(2023, 11, 14, 22, 13, 20, 123456)]
    assert table.column("born").to_pylist()[0] == date(2022, 1, 8)
    assert "more than microsecond precision" in reasons(table)[3]


def test_numeric_dates_are_epoch_days_and_numeric_timestamps_need_a_schema() -> None:
    table = decode([
        event("c", after={"id": 1, "born": 0, "updated_at": "2024-03-01T10:00:00+02:00", "local": "2024-03-01T10:00:00"}),
        event("c", after={"id": 2, "updated_at": 1709280000000}),
        event("c", after={"id": 3, "local": 1709280000000000}),
        event("c", after={"id": 4, "updated_at": "2024-03-01T10:00:00"}),
        event("c", after={"id": 5, "local": "2024-03-01T10:00:00Z"}),
        event("c", after={"id": 6, "updated_at": "2024-03-01T10:00:00.123456789Z"}),
        event("c", after={"id": 7, "updated_at": "2024-03-01T10:00:00.123456000Z"}),
    ])
    first = table.slice(0, 1).to_pylist()[0]
    assert first["born"] == date(1970, 1, 1)
    assert first["updated_at"] == datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
    assert first["local"] == datetime(2024, 3, 1, 10, 0)
    found = reasons(table)
    assert found[0] is None and found[6] is None
    assert "ambiguous without the record's schema" in found[1] and "ambiguous" in found[2]
    assert "has no UTC offset" in found[3]
    assert "has a UTC offset" in found[4]
    assert "more than microsecond precision" in found[5]


def unscaled(value: int) -> str:
    """A Connect Decimal's JSON form: base64 of the big-endian two's-complement unscaled value."""
    return base64.b64encode(value.to_bytes((value.bit_length() + 8) // 8 or 1, "big", signed=True)).decode()


def wrapped_event(fields: list[dict[str, Any]], after: dict[str, Any]) -> dict[str, Any]:
    """A change event in the schemas.enable=true form, its row schema made of ``fields`` (and ``id``)."""
    row = {"type": "struct", "fields": [{"type": "int64", "optional": False, "field": "id"}, *fields]}
    schema = {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"}]}
    return {"schema": schema, "payload": event("c", after=after)}


def test_debeziums_precise_decimals_are_decoded_with_the_scale_of_their_schema() -> None:
    """decimal.handling.mode=precise: a numeric(p,s) is a Connect Decimal (base64, the scale in the schema), an
    unconstrained numeric a VariableScaleDecimal struct; both must fit the column exactly."""
    decimal_field = {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
                     "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "price"}
    three = {**decimal_field, "parameters": {"scale": "3"}}
    table = decode([
        wrapped_event([decimal_field], {"id": 1, "price": unscaled(123450)}),
        wrapped_event([decimal_field], {"id": 2, "price": unscaled(-5)}),
        event("c", after={"id": 3, "price": {"scale": 1, "value": unscaled(-12345)}}),
        wrapped_event([three], {"id": 4, "price": unscaled(1005)}),
        wrapped_event([decimal_field], {"id": 5, "price": "not base64!"}),
        event("c", after={"id": 6, "price": {"scale": "1", "value": unscaled(1)}}),
        event("c", after={"id": 7, "price": unscaled(123450)}),  # no schema: base64 is not decimal text
    ])
    assert table.column("price").to_pylist()[:3] == [Decimal("1234.50"), Decimal("-0.05"), Decimal("-1234.50")]
    found = reasons(table)
    assert found[:3] == [None, None, None]
    assert "does not fit decimal(10,2) without rounding" in found[3]
    assert "is not a Connect Decimal" in found[4]
    assert "is not a decimal(10,2)" in found[5] and "is not a decimal(10,2)" in found[6]


def test_debeziums_isostring_dates_and_local_timestamps() -> None:
    """time.precision.mode=isostring writes a date as 2024-03-01Z and a local timestamp with Z; the schema
    (IsoTimestamp) says that Z is not an offset. Without the schema such a value stays refused in a timestamp column."""
    iso = {"type": "string", "optional": True, "name": "io.debezium.time.IsoTimestamp", "field": "local"}
    table = decode([
        wrapped_event([iso], {"id": 1, "local": "2024-03-01T10:00:00.123456Z", "born": "2024-03-01Z"}),
        event("c", after={"id": 2, "born": "2024-03-01Z", "local": "2024-03-01T10:00:00Z"}),
    ])
    assert table.slice(0, 1).to_pylist()[0]["local"] == datetime(2024, 3, 1, 10, 0, 0, 123456)
    assert table.slice(0, 1).to_pylist()[0]["born"] == date(2024, 3, 1)
    assert reasons(table)[0] is None and "has a UTC offset" in reasons(table)[1]


PLACEHOLDER = "__debezium_unavailable_value"
REQUIRED_TEXT = [Column(name="id", type="long", required=True), Column(name="bio", type="string", required=True),
                 Column(name="n", type="int")]


def test_a_value_debezium_did_not_send_is_null_and_named_to_carry_never_stored() -> None:
    """An unchanged TOASTed column arrives as __debezium_unavailable_value (text) or its bytes (base64)."""
    records = [
        event("u", after={"id": 1, "name": PLACEHOLDER, "n": 5}),
        event("u", after={"id": 2, "blob": base64.b64encode(PLACEHOLDER.encode()).decode()}),
        event("d", before={"id": 3, "name": PLACEHOLDER}),  # a delete needs the key alone
        event("c", after={"id": 4, "name": "plain"}),
        event("u", after={"id": 5, "name": PLACEHOLDER.encode().hex()}),  # bytea as hex text in a string column
    ]
    table = decode(records)
    assert reasons(table) == [None] * 5
    assert table.column(CARRY_COLUMN).to_pylist() == [["name"], ["blob"], None, None, ["name"]]
    assert table.column("name").to_pylist() == [None, None, None, "plain", None]
    assert table.column("blob").to_pylist() == [None] * 5
    assert table.column("n").to_pylist()[0] == 5
    # a row to carry keeps its record and position, should it become a dead letter
    assert table.column(RAW_COLUMN).to_pylist()[:1] == [json.dumps(records[0])]
    assert json.loads(table.column(POSITION_COLUMN).to_pylist()[0]) == at(0)
    assert table.column(RAW_COLUMN).to_pylist()[2:4] == [None, None]


def test_upsert_records_flattened_from_debezium_carry_unsent_values_too() -> None:
    table = decode([{"id": 1, "name": PLACEHOLDER, "n": 3}], fmt="upsert", keys=[{"id": 1}])
    assert reasons(table) == [None] and table.column(CARRY_COLUMN).to_pylist() == [["name"]]
    assert table.column("name").to_pylist() == [None]


def test_a_required_column_may_wait_for_its_carried_value_but_a_key_may_not() -> None:
    table = decode([event("u", after={"id": 1, "bio": PLACEHOLDER}),
                    event("u", after={"id": 2, "bio": None})], columns=REQUIRED_TEXT)
    assert reasons(table)[0] is None and table.column(CARRY_COLUMN).to_pylist()[0] == ["bio"]
    assert "required field bio is missing or null" in reasons(table)[1]
    keyed_by_text = [Column(name="code", type="string", required=True), Column(name="n", type="int")]
    bad = decode([event("c", after={"code": PLACEHOLDER, "n": 1})], columns=keyed_by_text, key=["code"])
    assert "key field(s) without a value" in reasons(bad)[0]


def test_a_transaction_block_is_accepted() -> None:
    """provide.transaction.metadata=true adds a transaction block to every change event."""
    record = event("c", after={"id": 1, "name": "a"})
    record["transaction"] = {"id": "571:53195829", "total_order": 1, "data_collection_order": 1}
    assert good(decode([record])) == [{"id": 1, "name": "a", OP_COLUMN: OP_UPSERT, ORDER_COLUMN: 0}]


def test_collapse_carries_an_unsent_value_from_the_keys_earlier_change_in_the_trigger() -> None:
    table = decode([
        event("c", after={"id": 1, "bio": "long text", "n": 1}),
        event("u", after={"id": 1, "bio": PLACEHOLDER, "n": 2}),
        event("u", after={"id": 1, "bio": PLACEHOLDER, "n": 3}),
        event("u", after={"id": 2, "bio": PLACEHOLDER, "n": 4}),  # only the table has its value
        event("d", before={"id": 3}),
        event("c", after={"id": 3, "bio": PLACEHOLDER, "n": 5}),  # deleted earlier in the trigger: nothing to keep
    ], columns=REQUIRED_TEXT)
    inserts, keys, carried, _ = collapse(table, KEY)
    assert inserts.to_pylist() == [{"id": 1, "bio": "long text", "n": 3}]
    assert keys.column("id").to_pylist() == [1, 2, 3]
    assert carried.select(["id", "n", CARRY_COLUMN]).to_pylist() == [
        {"id": 2, "n": 4, CARRY_COLUMN: ["bio"]}, {"id": 3, "n": 5, CARRY_COLUMN: ["bio"]}]
    errors = carried.column(ERROR_COLUMN).to_pylist()
    assert errors[0] is None and "deleted earlier in the trigger" in errors[1]
    assert json.loads(carried.column(POSITION_COLUMN).to_pylist()[0]) == at(3)


def test_values_are_decoded_strictly() -> None:
    table = decode([
        event("c", after={"id": 1, "price": "12.30", "blob": base64.b64encode(b"\x00\xff").decode(), "active": True,
                          "score": 1, "n": 2**31 - 1}),
        event("c", after={"id": 2, "price": 12.345}),
        event("c", after={"id": 3, "name": 42}),
        event("c", after={"id": 4, "surprise": 1}),
        event("c", after={"id": "5"}),
        event("c", after={"id": 6, "n": 2**31}),
        event("c", after={"id": 7, "active": "yes"}),
        event("c", after={"id": 8, "blob": "not base64!"}),
        event("c", after={"id": 9.0}),
        event("c", after={"id": 10, "price": 123456789.5}),
        event("c", after={"id": 11, "score": True}),
        event("c", after={"id": 12, "price": 0.1}),
    ])
    row = table.slice(0, 1).to_pylist()[0]
    assert (row["price"], row["blob"], row["active"], row["score"], row["n"]) == (
        Decimal("12.30"), b"\x00\xff", True, 1.0, 2**31 - 1)
    assert reasons(table)[0] is None and reasons(table)[11] is None
    assert table.column("price").to_pylist()[11] == Decimal("0.10")  # a JSON 0.1 is exact: no binary float between
    expected = {
        1: "field price: value 12.345 does not fit decimal(10,2) without rounding",
        2: "field name: value 42 is a number, not a string",
        3: "unknown field(s) not in spec.schema: surprise (in after)",
        4: "field id: value 5 is not a long",
        5: f"field n: value {2**31} is not a int",
        6: "field active: value yes is not a boolean",
        7: "field blob: value not base64! is not base64 text (a binary column takes base64)",
        8: "field id: value 9.0 is not a long",
        9: "field price: value 123456789.5 does not fit decimal(10,2)",
        10: "field score: value true is not a double",
    }
    assert {i: r for i, r in enumerate(reasons(table)) if r} == expected


def test_bad_records_are_dead_letters_with_reason_raw_and_position() -> None:
    table = decode([
        "{not json", '{"op": "c", "op": "c"}', "[1, 2]", event("x", after={"id": 1}), {"before": None},
        event("d", before=None), event("c", after=None), event("d", before={"name": "no key"}),
        event("c", after={"name": "no id"}), b"\xff\xfe", event("t"), '{"op": "c", "after": {"id": NaN}}',
    ])
    assert reasons(table) == [
        "malformed JSON",
        "duplicate key(s) in the record: op",
        "record is an array, not a JSON object",
        'unknown op "x" (a change event\'s op is c, r, u, d or t)',
        "not a Debezium change event: op is missing",
        "a delete (op d) without before: the deleted key is unknown",
        "op c without after: there is no new row",
        "key field id is missing or null (in before)",
        "required field id is missing or null (in after)",
        "record is not valid UTF-8 (the payload is its bytes in base64)",
        "a truncate (op t) where nothing empties the table (a decoder without truncates)",
        "malformed JSON",
    ]
    assert table.column(RAW_COLUMN).to_pylist()[0] == "{not json"
    assert table.column(RAW_COLUMN).to_pylist()[9] == base64.b64encode(b"\xff\xfe").decode()
    assert [json.loads(p) for p in table.column(POSITION_COLUMN).to_pylist()][:2] == [at(0), at(1)]
    assert table.column(ORDER_COLUMN).to_pylist() == list(range(12))
    assert table.column("id").null_count == 12
    inserts, deletes, _, _ = collapse(table, KEY)
    assert inserts.num_rows == 0 and deletes.num_rows == 0


def test_nested_duplicate_keys_are_refused() -> None:
    assert reasons(decode(['{"op": "c", "after": {"id": 1, "id": 2}}'])) == ["duplicate key(s) in a nested value: id"]


def test_upsert_format_rows_deleted_flag_and_tombstones_by_message_key() -> None:
    table = decode([
        {"id": 1, "name": "a"},
        {"id": 2, "name": "b", "__deleted": "false"},
        {"id": 1, "name": "a", "__deleted": "true"},
        {"id": 3, "__deleted": True},
        None,
        {"schema": {"type": "struct"}, "payload": {"id": 5, "name": "e"}},
        None,
        None,
        {"id": 6, "__deleted": "maybe"},
        None,
    ], fmt="upsert", keys=[{"id": 1}, {"id": 2}, {"id": 1}, {"id": 3}, {"id": 4}, {"id": 5},
                            {"schema": {"type": "struct"}, "payload": {"id": 9}}, None, {"id": 6}, {"id": 1, "name": "x"}])
    assert reasons(table)[:8] == [None] * 7 + ["a tombstone (null value) without a message key: the deleted key is unknown"]
    assert reasons(table)[8] == 'field __deleted: value "maybe" is not true, false, "true" or "false"'
    assert reasons(table)[9] == "message key has field(s) that are not key columns: name"
    assert table.slice(0, 7).select(["id", OP_COLUMN]).to_pylist() == [
        {"id": 1, OP_COLUMN: 0}, {"id": 2, OP_COLUMN: 0}, {"id": 1, OP_COLUMN: 1}, {"id": 3, OP_COLUMN: 1},
        {"id": 4, OP_COLUMN: 1}, {"id": 5, OP_COLUMN: 0}, {"id": 9, OP_COLUMN: 1}]
    assert table.column(RAW_COLUMN).to_pylist()[9] == '{"id": 1, "name": "x"}'
    # Files have no message keys: a JSON null record in the upsert format is not a row.
    assert reasons(decode(["null"], fmt="upsert")) == ["record is null, not a JSON object"]


def test_composite_keys() -> None:
    columns = [Column(name="tenant", type="string", required=True), Column(name="id", type="int", required=True),
               Column(name="v", type="long")]
    table = decode([
        event("c", after={"tenant": "a", "id": 1, "v": 1}), event("c", after={"tenant": "b", "id": 1, "v": 2}),
        event("u", before={"tenant": "a", "id": 1}, after={"tenant": "a", "id": 1, "v": 3}),
        event("d", before={"tenant": "b", "id": 1, "v": None}),
        event("u", before={"tenant": "a", "id": 2}, after={"tenant": "c", "id": 2, "v": 4}),
    ], columns=columns, key=["tenant", "id"])
    inserts, deletes, _, _ = collapse(table, ["tenant", "id"])
    assert inserts.to_pylist() == [{"tenant": "a", "id": 1, "v": 3}, {"tenant": "c", "id": 2, "v": 4}]
    assert deletes.to_pylist() == [{"tenant": "a", "id": 1}, {"tenant": "a", "id": 2}, {"tenant": "b", "id": 1},
                                   {"tenant": "c", "id": 2}]


def test_collapse_matches_a_reference_model_of_random_changes() -> None:
    rng = random.Random(13)
    records, state = [], {}
    for _ in range(3000):
        key = rng.randrange(200)
        if rng.random() < 0.3:
            records.append(event("d", before={"id": key}))
            state[key] = None
        else:
            name = f"n{rng.randrange(10**6)}"
            records.append(event(rng.choice("cru"), after={"id": key, "name": name}))
            state[key] = name
    # Decode in three units (different order bases), shuffle the rows: the order column alone decides.
    parts = [decode(records[i:i + 1000], base=(i // 1000) << 40) for i in range(0, 3000, 1000)]
    table = pa.concat_tables(parts)
    table = table.take(pa.array(rng.sample(range(table.num_rows), table.num_rows)))
    inserts, deletes, _, _ = collapse(table, KEY)
    assert {r["id"]: r["name"] for r in inserts.to_pylist()} == {k: v for k, v in state.items() if v is not None}
    assert deletes.column("id").to_pylist() == sorted(state)
    assert inserts.column_names == [c.name for c in COLUMNS]


def test_collapse_of_nothing() -> None:
    inserts, deletes, _, _ = collapse(decode([]), KEY)
    assert (inserts.num_rows, deletes.num_rows, deletes.column_names) == (0, 0, ["id"])


def test_unknown_format_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown changes format"):
        decode([], fmt="avro")


ARRAYS = [Column(name="id", type="long", required=True), Column(name="tags", type="array<string>"),
          Column(name="n", type="array<int>"), Column(name="prices", type="array<decimal(8,2)>"),
          Column(name="days", type="array<date>"), Column(name="seen", type="array<timestamptz>"),
          Column(name="blobs", type="array<binary>")]
ARRAY_FIELDS = [
    {"field": "tags", "type": "array", "optional": True, "items": {"type": "string", "optional": True}},
    {"field": "n", "type": "array", "optional": True, "items": {"type": "int32", "optional": True}},
    {"field": "prices", "type": "array", "optional": True, "items": {
        "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}}},
    {"field": "days", "type": "array", "optional": True,
     "items": {"type": "int32", "optional": True, "name": "io.debezium.time.Date"}},
    {"field": "seen", "type": "array", "optional": True,
     "items": {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp"}},
    {"field": "blobs", "type": "array", "optional": True, "items": {"type": "bytes", "optional": True}},
]


def test_connect_arrays_are_decoded_with_their_items_logical_types_and_null_elements() -> None:
    table = decode([
        wrapped_event(ARRAY_FIELDS, {"id": 1, "tags": ["a", None, ""], "n": [1, None], "prices": [unscaled(1999), None],
                                     "days": [19782, None], "seen": [1709287200000001], "blobs": ["AAE="]}),
        wrapped_event(ARRAY_FIELDS, {"id": 2, "tags": [], "n": None, "prices": [], "days": [], "seen": None}),
        event("c", after={"id": 3, "prices": ["1.50", 2], "days": ["2024-02-29Z"], "seen": ["2024-03-01T10:00:00Z"]}),
    ], columns=ARRAYS)
    assert reasons(table) == [None, None, None]
    rows = table.select([c.name for c in ARRAYS]).to_pylist()
    assert rows == [
        {"id": 1, "tags": ["a", None, ""], "n": [1, None], "prices": [Decimal("19.99"), None],
         "days": [date(2024, 2, 29), None], "seen": [datetime(2024, 3, 1, 10, 0, 0, 1, tzinfo=UTC)],
         "blobs": [b"\x00\x01"]},
        {"id": 2, "tags": [], "n": None, "prices": [], "days": [], "seen": None, "blobs": None},
        {"id": 3, "tags": None, "n": None, "prices": [Decimal("1.50"), Decimal("2.00")], "days": [date(2024, 2, 29)],
         "seen": [datetime(2024, 3, 1, 10, tzinfo=UTC)], "blobs": None},
    ]


def test_bad_array_elements_are_dead_letters_naming_the_field() -> None:
    table = decode([
        event("c", after={"id": 1, "n": [1, "2"]}),
        event("c", after={"id": 2, "n": [2**31]}),
        event("c", after={"id": 3, "prices": ["1.234"]}),
        event("c", after={"id": 4, "tags": "a"}),
        event("c", after={"id": 5, "tags": [["nested"]]}),
        event("c", after={"id": 6, "days": ["yesterday"]}),
        event("c", after={"id": 7, "seen": [1709287200000]}),  # no schema: a numeric timestamp is ambiguous
    ], columns=ARRAYS)
    found = reasons(table)
    assert found[0] == 'field n: value 2 is not a int (an element of array<int>)'
    assert found[1].startswith("field n: value 2147483648 is not a int")
    assert found[2] == "field prices: value 1.234 does not fit decimal(8,2) without rounding (an element of " \
        "array<decimal(8,2)>)"
    assert found[3] == "field tags: value a is not an array<string>"
    assert found[4].startswith('field tags: value ["nested"] is an array, not a string')
    assert found[5].startswith("field days:") and found[6].startswith("field seen: numeric value")


def test_an_unsent_toasted_array_is_carried_like_other_placeholders() -> None:
    """Debezium's placeholder of an unchanged TOASTed array: a list of the placeholder text (text[]), of its base64
    (bytea[]), of its bytes as numbers (integer[], bigint[], date[]), or the placeholder text itself (other arrays)."""
    as_numbers = list(PLACEHOLDER.encode())
    table = decode([
        event("u", after={"id": 1, "tags": [PLACEHOLDER], "n": as_numbers, "days": as_numbers, "prices": PLACEHOLDER,
                          "blobs": [base64.b64encode(PLACEHOLDER.encode()).decode()], "seen": []}),
        event("u", after={"id": 2, "tags": [PLACEHOLDER, "more"], "n": as_numbers[:-1]}),
        # uuid[]: Java's UUID.nameUUIDFromBytes of the placeholder's bytes (printed by the JDK)
        event("u", after={"id": 3, "tags": ["b68a35a7-17ad-35b3-af2a-ae46edb4545a"]}),
    ], columns=ARRAYS)
    assert table.column(CARRY_COLUMN).to_pylist()[0] == ["tags", "n", "prices", "days", "blobs"]
    assert table.column(CARRY_COLUMN).to_pylist()[2] == ["tags"]
    assert table.column("seen").to_pylist()[0] is not None
    # a list that only starts like the placeholder is a value
    assert table.column(CARRY_COLUMN).to_pylist()[1] is None and reasons(table)[1] is None
    assert table.column("tags").to_pylist()[1] == [PLACEHOLDER, "more"]
