"""The peers benchmark's data: taxi-like rows as JSON lines, and an order-independent table checksum.

The rows are made with numpy from a seed (no Spark), so every contender reads exactly the same
bytes: the JSON files for the file sources, and the same lines as Kafka record values. Values are
chosen so that the JSON text round-trips exactly through any JSON reader into the table's types
(millisecond timestamps, doubles with at most two decimals, decimals with two), which lets one
reader check every contender's table against the source rows with a count and a checksum.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Column name, spec type (icebergsync's spec.schema), Spark SQL type: the same table for every contender.
COLUMNS: list[tuple[str, str, str]] = [
    ("id", "long", "bigint"),
    ("ts", "timestamptz", "timestamp"),
    ("vendor", "string", "string"),
    ("pickup_zone", "int", "int"),
    ("dropoff_zone", "int", "int"),
    ("passenger_count", "int", "int"),
    ("trip_distance", "double", "double"),
    ("fare_amount", "decimal(10,2)", "decimal(10,2)"),
    ("tip_amount", "double", "double"),
    ("total_amount", "double", "double"),
    ("payment_type", "string", "string"),
    ("rate_code", "int", "int"),
    ("store_and_forward", "boolean", "boolean"),
    ("pickup_date", "date", "date"),
    ("notes", "string", "string"),
]
ARROW_SCHEMA = pa.schema([
    ("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("vendor", pa.string()),
    ("pickup_zone", pa.int32()), ("dropoff_zone", pa.int32()), ("passenger_count", pa.int32()),
    ("trip_distance", pa.float64()), ("fare_amount", pa.decimal128(10, 2)), ("tip_amount", pa.float64()),
    ("total_amount", pa.float64()), ("payment_type", pa.string()), ("rate_code", pa.int32()),
    ("store_and_forward", pa.bool_()), ("pickup_date", pa.date32()), ("notes", pa.string()),
])
BASE_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
VENDORS = np.array(["CMT", "VTS", "DDS", "MYC", "HVF", "CURB"], dtype=object)
PAYMENTS = np.array(["card", "cash", "no_charge", "dispute", "voided"], dtype=object)
NOTE_WORDS = np.array(["airport", "downtown", "late night", "rush hour", "scenic route", "stadium", "harbor",
                       "midtown"], dtype=object)


# The nested shape: the same values, the trip's and the fare's fields each in a struct (what an application event
# looks like); the other columns stay at the top level.
NESTED_GROUPS = {"trip": ("vendor", "pickup_zone", "dropoff_zone", "passenger_count", "trip_distance"),
                 "fare": ("fare_amount", "tip_amount", "total_amount", "payment_type", "rate_code")}
SHAPES = ("flat", "nested")


def _layout(shape: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """The top-level columns of ``shape``: (name, [] for a column of COLUMNS, else the struct's fields)."""
    if shape == "flat":
        return [(name, []) for name, _spec, _sql in COLUMNS]
    grouped = {field for fields in NESTED_GROUPS.values() for field in fields}
    by_name = {column[0]: column for column in COLUMNS}
    layout: list[tuple[str, list[tuple[str, str, str]]]] = []
    for name, _spec, _sql in COLUMNS:
        group = next((group for group, fields in NESTED_GROUPS.items() if name == fields[0]), None)
        if group is not None:
            layout.append((group, [by_name[field] for field in NESTED_GROUPS[group]]))
        elif name not in grouped:
            layout.append((name, []))
    return layout


def spark_ddl(shape: str = "flat") -> str:
    by_name = {name: sql for name, _spec, sql in COLUMNS}
    return ", ".join(f"`{name}` {by_name[name]}" if not fields else
                     f"`{name}` struct<{','.join(f'`{field}`:{sql}' for field, _spec, sql in fields)}>"
                     for name, fields in _layout(shape))


def spec_schema(shape: str = "flat") -> list[dict[str, Any]]:
    by_name = {name: spec for name, spec, _sql in COLUMNS}
    return [{"name": name, "type": by_name[name] if not fields else
             f"struct<{', '.join(f'{field}: {spec}' for field, spec, _sql in fields)}>"}
            for name, fields in _layout(shape)]


def make_rows(start: int, count: int, total: int, days: int, seed: int = 14) -> pa.Table:
    """Rows ``start .. start+count`` of ``total``: event time advances over ``days`` days with a few
    minutes of disorder, so files (and triggers) cover consecutive stretches of days, as a trip feed does."""
    rng = np.random.default_rng([seed, start])
    ids = np.arange(start, start + count, dtype=np.int64)
    span_ms = days * 86_400_000
    ts_ms = BASE_MS + (ids * span_ms) // max(1, total) + rng.integers(-300_000, 300_000, count)
    ts_ms = np.maximum(ts_ms, BASE_MS)
    distance_c = rng.integers(30, 4030, count)  # hundredths of a mile
    fare_c = 300 + (distance_c * 275) // 100  # cents
    tip_c = np.where(rng.integers(0, 3, count) == 0, 0, (fare_c * rng.integers(0, 25, count)) // 100)
    zone = rng.integers(1, 266, count)
    notes = np.where(
        rng.integers(0, 4, count) == 0, None,
        "trip " + ids.astype(str).astype(object) + " via " + NOTE_WORDS[rng.integers(0, len(NOTE_WORDS), count)]
        + " zone " + zone.astype(str).astype(object))
    ts = pa.array(ts_ms * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return pa.table({
        "id": pa.array(ids),
        "ts": ts,
        "vendor": pa.array(VENDORS[rng.integers(0, len(VENDORS), count)], pa.string()),
        "pickup_zone": pa.array(zone, pa.int32()),
        "dropoff_zone": pa.array(rng.integers(1, 266, count), pa.int32()),
        "passenger_count": pa.array(rng.integers(1, 7, count), pa.int32()),
        "trip_distance": pa.array(distance_c / 100.0),
        "fare_amount": pa.array(fare_c / 100.0).cast(pa.decimal128(10, 2)),
        "tip_amount": pa.array(tip_c / 100.0),
        "total_amount": pa.array((fare_c + tip_c + 50) / 100.0),
        "payment_type": pa.array(PAYMENTS[rng.integers(0, len(PAYMENTS), count)], pa.string()),
        "rate_code": pa.array(rng.integers(1, 7, count), pa.int32()),
        "store_and_forward": pa.array(rng.integers(0, 50, count) == 0),
        "pickup_date": pc.cast(ts, pa.date32()),
        "notes": pa.array(notes, pa.string()),
    }, schema=ARROW_SCHEMA)


def _quoted(values: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise('"', values, '"', "")


def json_lines(table: pa.Table, shape: str = "flat") -> pa.Array:
    """One JSON object per row (no nested quoting needed: no value contains quotes or backslashes); ``nested``: the
    trip's and the fare's fields in objects of their own."""
    parts: list[Any] = []
    opened: str | None = None
    for index, (name, spec, _sql) in enumerate(COLUMNS):
        group = next((group for group, fields in NESTED_GROUPS.items() if name in fields), None) \
            if shape == "nested" else None
        column = table.column(name).combine_chunks()
        if spec == "timestamptz":  # Spark's default JSON timestamp format: 2025-01-01T00:00:05.123Z
            millis = pc.strftime(column.cast(pa.timestamp("ms", tz="UTC")), format="%Y-%m-%dT%H:%M:%S")
            text = _quoted(pc.binary_join_element_wise(millis, "Z", ""))
        elif spec in ("string", "date"):
            text = _quoted(column.cast(pa.string()))
        elif spec == "boolean":
            text = pc.if_else(column, "true", "false")
        else:
            text = column.cast(pa.string())
        if column.null_count:
            text = pc.if_else(pc.is_null(column), "null", text)
        separator = "{" if index == 0 else ","
        if group != opened:  # leaving a struct, entering one, or both
            separator = ("}," if opened is not None else separator) + (f'"{group}":{{' if group is not None else "")
            opened = group
        parts.append(f'{separator}"{name}":')
        parts.append(text)
    parts.append("}}" if opened is not None else "}")
    return pc.binary_join_element_wise(*parts, "")


def write_json_files(directory: Path, rows: int, files: int, days: int, shape: str = "flat") -> dict[str, Any]:
    """``files`` JSON-lines files ``part-00000.json`` … holding rows 0..rows in order (in ``shape``); returns
    facts."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-rows // files)
    total_bytes = 0
    for index in range(files):
        start = index * per_file
        count = max(0, min(per_file, rows - start))
        lines = json_lines(make_rows(start, count, rows, days), shape)
        data = "\n".join(lines.to_pylist()) + "\n" if count else ""
        tmp = directory / f".part-{index:05d}.json"
        tmp.write_text(data)
        tmp.rename(directory / f"part-{index:05d}.json")
        total_bytes += len(data)
    return {"rows": rows, "files": files, "days": days, "json_bytes": total_bytes}


def write_parquet_files(directory: Path, rows: int, files: int, days: int) -> int:
    """The same rows as :func:`write_json_files`, as zstd Parquet files ``part-00000.parquet`` …
    (pyarrow's defaults otherwise); returns their bytes."""
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-rows // files)
    total_bytes = 0
    for index in range(files):
        start = index * per_file
        tmp = directory / f".part-{index:05d}.parquet"
        pq.write_table(make_rows(start, max(0, min(per_file, rows - start)), rows, days), tmp, compression="zstd")
        total_bytes += tmp.stat().st_size
        tmp.rename(directory / f"part-{index:05d}.parquet")
    return total_bytes


def json_parse_options() -> Any:
    """pyarrow's JSON parse options for the files: the schema (dates as text: pyarrow reads dates as
    day counts), unknown fields refused."""
    import pyarrow.json as pj

    as_text = pa.schema([pa.field(f.name, pa.string()) if pa.types.is_date(f.type) else f for f in ARROW_SCHEMA])
    return pj.ParseOptions(explicit_schema=as_text, unexpected_field_behavior="error")


def read_json_files(directory: Path) -> pa.Table:
    """The source rows parsed back from the files with pyarrow (the generator's own check)."""
    import pyarrow.json as pj

    tables = []
    for path in sorted(directory.glob("part-*.json")):
        if path.stat().st_size:
            parsed = pj.read_json(path, parse_options=json_parse_options())
            tables.append(parsed.select(ARROW_SCHEMA.names).cast(ARROW_SCHEMA))
    return pa.concat_tables(tables)


def checksum(table: pa.Table) -> dict[str, Any]:
    """Row count and an order-independent checksum: the sum (mod 2**64) of a 64-bit hash of every row.

    Rows are first brought to the same Arrow types (whatever writer made the table) and decimals to
    their text, so equal rows hash equally; a lost, duplicated or altered row changes the sum.
    """
    import pandas as pd

    if any(group in table.column_names for group in NESTED_GROUPS):  # the nested shape: its struct fields
        flat = table.flatten()
        table = flat.rename_columns([name.split(".")[-1] for name in flat.column_names])
    columns = {}
    for field in ARROW_SCHEMA:
        column = table.column(field.name)
        if pa.types.is_decimal(field.type):
            column = column.cast(pa.decimal128(38, 2)).cast(pa.string())
        elif pa.types.is_timestamp(field.type):
            column = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        elif pa.types.is_date(field.type):
            column = column.cast(pa.int32())
        else:
            column = column.cast(field.type)
        columns[field.name] = column
    frame = pa.table(columns).to_pandas()
    hashes = pd.util.hash_pandas_object(frame, index=False).to_numpy(dtype=np.uint64)
    with np.errstate(over="ignore"):
        total = int(hashes.sum(dtype=np.uint64))
    return {"rows": table.num_rows, "checksum": f"{total:016x}"}


def describe(meta_path: Path) -> dict[str, Any]:
    return json.loads(meta_path.read_text()) if meta_path.exists() else {}
