"""Decoding raw records into the declared columns, and the optional SQL transform.

Every frame handed to the writer has the declared columns plus three control columns:
``_isync_error`` (why the row is a dead letter, null when it is good), ``_isync_raw`` (the raw
record for the dead-letter table) and ``_isync_position`` (its source position as JSON).
Decoding happens in the JVM (``from_json``) so bad values are found without Python per-row work.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icebergsync.errors import SpecError
from icebergsync.schema import spark_ddl, spark_type
from icebergsync.spec import Column as SpecColumn
from spark_app.deadletter import ERROR_COLUMN, POSITION_COLUMN, RAW_COLUMN

CORRUPT = "_isync_corrupt"


def _first_error(checks: list[Column]) -> Column:
    """The first non-null message among ``checks`` (or null)."""
    return F.coalesce(*checks) if checks else F.lit(None).cast("string")


def _prior_error(frame: DataFrame) -> Column:
    """The error a source already set (a whole unusable input), or null."""
    return F.col(ERROR_COLUMN) if ERROR_COLUMN in frame.columns else F.lit(None).cast("string")


NOT_UTF8 = "record is not valid UTF-8 (the payload is its bytes in base64)"


def _raw_text(text: Column) -> Column:
    """The raw record for the dead-letter table: the text, or its bytes in base64 when it is not valid UTF-8."""
    return F.when(F.is_valid_utf8(text), text).otherwise(F.base64(text.cast("binary")))


def _json_kind(variant_type: Column) -> Column:
    """``object``, ``array``, ``boolean``, ``string`` or ``number`` for a ``schema_of_variant`` result."""
    return (F.when(variant_type.startswith("OBJECT"), F.lit("an object"))
            .when(variant_type.startswith("ARRAY"), F.lit("an array"))
            .when(variant_type == "BOOLEAN", F.lit("a boolean"))
            .when(variant_type == "STRING", F.lit("a string"))
            .otherwise(F.lit("a number")))


def _strict_value_error(column: SpecColumn, decoded: Column, variant: Column) -> Column | None:
    """What ``from_json`` would coerce silently: a non-string into a string column, a decimal it would round."""
    value = F.variant_get(variant, f"$.{column.name}", "variant")
    kind = F.schema_of_variant(value)
    if column.type == "string":
        return F.when(value.isNotNull() & ~kind.isin("STRING", "VOID"), F.concat(
            F.lit(f"field {column.name}: value "), F.to_json(value), F.lit(" is "), _json_kind(kind),
            F.lit(", not a string")))
    if column.type.startswith("decimal"):
        scale = int(column.type.split(",")[1].rstrip(") "))
        text = F.regexp_replace(F.to_json(value), '^"|"$', "")
        plain = text.rlike(r"^\s*[+-]?[0-9]*\.?[0-9]*\s*$")
        exact = text.rlike(rf"^\s*[+-]?[0-9]*(\.[0-9]{{0,{scale}}}0*)?\s*$")
        rounded = F.when(plain, ~exact).otherwise(decoded.cast("double") != text.cast("double"))
        return F.when(decoded.isNotNull() & rounded, F.concat(
            F.lit(f"field {column.name}: value "), text, F.lit(f" does not fit {column.type} without rounding")))
    return None


def decode_json(frame: DataFrame, raw: str, columns: list[SpecColumn], position: Column) -> DataFrame:
    """Parse the JSON text column ``raw`` into ``columns``, strictly; a record that does not fit gets an error.

    A record is a dead letter when it is not valid UTF-8, not JSON, not an object, has a key twice,
    has a field ``columns`` do not declare, or has a value that does not fit its column without
    coercion: a string column takes only strings, a decimal only values it holds without rounding.
    """
    schema = f"{spark_ddl(columns)}, `{CORRUPT}` string"
    source = F.col(raw).cast("string")
    parsed = frame.select(
        source.alias("_text"),
        _raw_text(source).alias(RAW_COLUMN),
        position.alias(POSITION_COLUMN),
        _prior_error(frame).alias("_prior"),
        F.from_json(source, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}).alias("_p"),
        F.try_parse_json(source).alias("_v"),
        F.json_object_keys(source).alias("_keys"),
    )
    text, variant, keys = F.col("_text"), F.col("_v"), F.col("_keys")
    duplicates = F.array_distinct(F.filter(keys, lambda key: F.size(F.filter(keys, lambda other: other == key)) > 1))
    unknown = F.array_except(keys, F.array(*[F.lit(c.name) for c in columns]))
    strict = [check for c in columns if (check := _strict_value_error(c, F.col(f"_p.{c.name}"), variant)) is not None]
    mismatches = [
        F.when(
            F.col(f"_p.{c.name}").isNull() & F.get_json_object(text, f"$.{c.name}").isNotNull(),
            F.concat(F.lit(f"field {c.name}: value "), F.get_json_object(text, f"$.{c.name}"), F.lit(f" is not a {c.type}")),
        )
        for c in columns
    ]
    error = (
        F.when(F.col("_prior").isNotNull(), F.col("_prior"))
        .when(text.isNull(), F.lit("empty record"))
        .when(~F.is_valid_utf8(text), F.lit(NOT_UTF8))
        .when(variant.isNull() & (F.size(duplicates) > 0),
              F.concat(F.lit("duplicate key(s) in the record: "), F.array_join(duplicates, ", ")))
        .when(variant.isNull() & F.get_json_object(text, "$").isNotNull(), F.lit("duplicate keys in a nested value"))
        .when(variant.isNull(), F.lit("malformed JSON"))
        .when(~F.schema_of_variant(variant).startswith("OBJECT"),
              F.concat(F.lit("record is "), _json_kind(F.schema_of_variant(variant)), F.lit(", not a JSON object")))
        .when(F.size(unknown) > 0, F.concat(F.lit("unknown field(s) not in spec.schema: "), F.array_join(unknown, ", ")))
        .otherwise(F.coalesce(*strict, *mismatches,
                              F.when(F.col(f"_p.{CORRUPT}").isNotNull(), F.lit("record does not match the schema"))))
    )
    return parsed.select(
        *[F.col(f"_p.{c.name}").alias(c.name) for c in columns],
        error.alias(ERROR_COLUMN), F.col(RAW_COLUMN), F.col(POSITION_COLUMN),
    )


def decode_csv(frame: DataFrame, raw: str, columns: list[SpecColumn], position: Column) -> DataFrame:
    """Parse the CSV line column ``raw`` into ``columns``; a line that does not fit the schema gets an error."""
    schema = f"{spark_ddl(columns)}, `{CORRUPT}` string"
    text = F.col(raw).cast("string")
    parsed = frame.select(
        F.is_valid_utf8(text).alias("_utf8"), _raw_text(text).alias(RAW_COLUMN), position.alias(POSITION_COLUMN),
        _prior_error(frame).alias("_prior"),
        F.from_csv(text, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}).alias("_p"),
    )
    error = (
        F.when(F.col("_prior").isNotNull(), F.col("_prior"))
        .when(~F.col("_utf8"), F.lit(NOT_UTF8))
        .when(F.col(f"_p.{CORRUPT}").isNotNull(), F.lit("CSV row does not match the schema"))
    )
    return parsed.select(
        *[F.col(f"_p.{c.name}").alias(c.name) for c in columns],
        error.alias(ERROR_COLUMN), F.col(RAW_COLUMN), F.col(POSITION_COLUMN),
    )


def conform_columns(frame: DataFrame, columns: list[SpecColumn], what: str) -> DataFrame:
    """Cast ``frame``'s columns to the declared types with ``try_cast``; a value that does not fit is an error.

    Declared columns the frame lacks become null (the writer then rejects null required columns).
    Columns the frame has that are not declared are a spec error, raised before anything runs.
    """
    declared = {c.name for c in columns}
    control = {ERROR_COLUMN, RAW_COLUMN, POSITION_COLUMN}
    extra = [name for name in frame.columns if name not in declared and name not in control]
    if extra:
        raise SpecError([f"{what} produces columns that spec.schema does not declare: {extra}"])
    casts, checks = [], []
    for c in columns:
        if c.name in frame.columns:
            value = F.col(f"`{c.name}`")
            cast = value.try_cast(spark_type(c.type))
            checks.append(F.when(value.isNotNull() & cast.isNull(),
                                 F.concat(F.lit(f"field {c.name}: value "), value.cast("string"), F.lit(f" is not a {c.type}"))))
            casts.append(cast.alias(c.name))
        else:
            casts.append(F.lit(None).cast(spark_type(c.type)).alias(c.name))
    prior = [F.col(ERROR_COLUMN)] if ERROR_COLUMN in frame.columns else []
    keep = [F.col(name) for name in (RAW_COLUMN, POSITION_COLUMN) if name in frame.columns]
    missing = [F.lit(None).cast("string").alias(name) for name in (RAW_COLUMN, POSITION_COLUMN) if name not in frame.columns]
    return frame.select(*casts, _first_error(prior + checks).alias(ERROR_COLUMN), *keep, *missing)


def select_declared(frame: DataFrame, columns: list[SpecColumn]) -> DataFrame:
    """Keep the declared columns (absent ones as null) and the control columns; drop the rest.

    A generator record has more columns than a spec may declare: the schema picks among them.
    """
    present = set(frame.columns)
    return frame.select(
        *[F.col(f"`{c.name}`") if c.name in present else F.lit(None).cast(spark_type(c.type)).alias(c.name)
          for c in columns],
        *[F.col(name) for name in (ERROR_COLUMN, RAW_COLUMN, POSITION_COLUMN)],
    )


def apply_transform(spark: SparkSession, frame: DataFrame, sql: str | None, columns: list[SpecColumn]) -> DataFrame:
    """Run the spec's SQL over the good records (view ``source``); bad records bypass it unchanged.

    The view holds every column of the source record; the query's output must fit the declared
    schema. With a transform the source range is evaluated twice (once per branch of the union);
    both evaluations read the same fixed range, so the result is exact.
    """
    if not sql:
        return select_declared(frame, columns)
    control = {ERROR_COLUMN, RAW_COLUMN, POSITION_COLUMN}
    good = frame.where(F.col(ERROR_COLUMN).isNull()).select(*[f"`{n}`" for n in frame.columns if n not in control])
    good.createOrReplaceTempView("source")
    try:
        transformed = spark.sql(sql)
        transformed.schema  # noqa: B018 - analyse now so a bad query fails before anything is written
    except Exception as exc:
        raise SpecError([f"spec.transform: {exc}"]) from None
    conformed = conform_columns(transformed, columns, "spec.transform")
    return conformed.unionByName(select_declared(frame.where(F.col(ERROR_COLUMN).isNotNull()), columns))
