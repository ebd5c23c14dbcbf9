"""Deterministic taxi-trip-like records: row ``id`` always has the same content.

Rows become available at ``rowsPerSecond`` from the moment the job starts (counted from the
resumed position); with ``totalRows`` the source is bounded. Frontier: ``{"next_id": N}``.
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from icebergsync.protocol import Frontier
from icebergsync.spec import GENERATOR_COLUMNS
from spark_app.sources.base import Pending, Source, SourceBatch

# Epoch micros of 2025-01-01T00:00:00Z; consecutive ids are 10 ms apart in event time.
BASE_TIME_MICROS = 1_735_689_600_000_000
MICROS_BETWEEN_ROWS = 10_000
ESTIMATED_BYTES_PER_ROW = 26  # compressed Parquet, measured on this data
VENDORS = ["CMT", "VTS", "DDS", "MYC", "HVF", "CURB"]
PAYMENTS = ["card", "cash", "no_charge", "dispute", "voided"]
NOTE_WORDS = ["airport", "downtown", "late night", "rush hour", "scenic route", "stadium", "harbor", "midtown"]


def _hash(salt: int) -> Column:
    return F.abs(F.xxhash64(F.col("id"), F.lit(salt)))


def _pick(options: list[str], salt: int) -> Column:
    return F.element_at(F.array(*[F.lit(option) for option in options]), (_hash(salt) % len(options) + 1).cast("int"))


def generator_columns() -> list[Column]:
    """Spark expressions computing every generator column from ``id`` alone."""
    distance = F.round((_hash(5) % 4000) / 100.0 + 0.3, 2)
    fare = (F.lit(3.0) + distance * 2.75).cast("decimal(10,2)")
    tip = F.round(F.when(_hash(9) % 3 == 0, 0.0).otherwise(fare.cast("double") * ((_hash(10) % 25) / 100.0)), 2)
    ts = F.timestamp_micros(F.lit(BASE_TIME_MICROS) + F.col("id") * MICROS_BETWEEN_ROWS)
    return [
        F.col("id"),
        ts.alias("ts"),
        _pick(VENDORS, 1).alias("vendor"),
        (_hash(2) % 265 + 1).cast("int").alias("pickup_zone"),
        (_hash(3) % 265 + 1).cast("int").alias("dropoff_zone"),
        (_hash(4) % 6 + 1).cast("int").alias("passenger_count"),
        distance.alias("trip_distance"),
        fare.alias("fare_amount"),
        tip.alias("tip_amount"),
        F.round(fare.cast("double") + tip + 0.5, 2).alias("total_amount"),
        _pick(PAYMENTS, 6).alias("payment_type"),
        (_hash(7) % 6 + 1).cast("int").alias("rate_code"),
        (_hash(8) % 50 == 0).alias("store_and_forward"),
        F.to_date(ts).alias("pickup_date"),
        F.when(_hash(11) % 4 == 0, F.lit(None).cast("string"))
        .otherwise(F.concat_ws(" ", F.lit("trip"), F.col("id").cast("string"), F.lit("via"), _pick(NOTE_WORDS, 12),
                               F.lit("zone"), (_hash(2) % 265 + 1).cast("string")))
        .alias("notes"),
    ]


def generate(spark_range: DataFrame) -> DataFrame:
    """Generator rows for the ids of ``spark_range`` (a DataFrame with an ``id`` column)."""
    frame = spark_range.select(*generator_columns())
    assert frame.columns == [column.name for column in GENERATOR_COLUMNS]
    return frame


class GeneratorSource(Source):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        settings = self.spec.source.generator
        assert settings is not None
        self.settings = settings
        self._clock_start: float | None = None
        self._start_id = 0

    def initial_frontier(self) -> Frontier:
        return {"next_id": 0}

    @staticmethod
    def check_frontier(frontier: Frontier) -> None:
        next_id = frontier.get("next_id")
        if set(frontier) != {"next_id"} or not isinstance(next_id, int) or isinstance(next_id, bool) or next_id < 0:
            raise ValueError('a generator frontier is {"next_id": <id ≥ 0>}')

    def _available(self, next_id: int) -> int:
        """Rows generated so far at the configured rate, counted from where this run started."""
        now = time.monotonic()
        if self._clock_start is None:
            self._clock_start, self._start_id = now, next_id
        produced = self._start_id + int((now - self._clock_start) * self.settings.rows_per_second)
        total = self.settings.total_rows
        return produced if total is None else min(produced, total)

    def pending(self, frontier: Frontier, max_bytes: int) -> Pending | None:
        next_id = int(frontier["next_id"])
        limit = min(self.settings.max_rows_per_trigger, max(1, max_bytes // ESTIMATED_BYTES_PER_ROW))
        end = min(self._available(next_id), next_id + limit)
        if end <= next_id:
            return None
        total = self.settings.total_rows
        rows = end - next_id
        return Pending(
            end={"next_id": end},
            estimated_bytes=rows * ESTIMATED_BYTES_PER_ROW,
            reaches_end=total is not None and end >= total,
            lag={"records": self._available(next_id) - end},
        )

    def read(self, frontier: Frontier, pending: Pending) -> SourceBatch:
        start, end = int(frontier["next_id"]), int(pending.end["next_id"])
        ids = self.spark.range(start, end, 1, self.parallelism(pending.estimated_bytes))
        return SourceBatch(frame=generate(ids), end=pending.end, lag=pending.lag)

    def exhausted(self, frontier: Frontier) -> bool:
        return self.settings.exhausted(frontier)
