"""The optional SQL transform (``spec.transform``) over decoded records, in the JVM.

Records are decoded in the tasks (spark_app/decoding/arrow_decode.py); with a transform the decoded
records become a DataFrame with the declared columns plus the control columns ``_isync_error``,
``_isync_raw`` and ``_isync_position``; the SQL runs over the good ones and its output is checked
against the declared schema.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icebergsync.errors import SpecError
from icebergsync.schema import spark_type
from icebergsync.spec import Column as SpecColumn
from spark_app.decoding.deadletter import ERROR_COLUMN, POSITION_COLUMN, RAW_COLUMN


def _first_error(checks: list[Column]) -> Column:
    """The first non-null message among ``checks`` (or null)."""
    return F.coalesce(*checks) if checks else F.lit(None).cast("string")


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
