"""Deterministic taxi-trip-like records: row ``id`` always has the same content.

Rows become available at ``rowsPerSecond`` from the moment the job starts (counted from the
resumed position); with ``totalRows`` the source is bounded. Frontier: ``{"next_id": N}``.
Each task computes its id range straight into Arrow with numpy (:func:`generate_arrow`): every
value is a pure function of the id (Spark's xxhash64 of the id with a per-column salt, and exact
integer arithmetic for the amounts), so a replayed range is identical.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from icebergsync.protocol import Frontier
from icebergsync.spec import GENERATOR_COLUMNS
from icebergsync.spec import Column as SpecColumn
from spark_app.decoding.source_positions import Position
from spark_app.sources.base import Pending, Source
from spark_app.sources.units import GeneratorUnit, UnitReader, UnitStats, WorkUnit

# Epoch micros of 2025-01-01T00:00:00Z; consecutive ids are 10 ms apart in event time.
BASE_TIME_MICROS = 1_735_689_600_000_000
MICROS_BETWEEN_ROWS = 10_000
MICROS_PER_DAY = 86_400_000_000
ESTIMATED_BYTES_PER_ROW = 26  # compressed Parquet, measured on this data
ROWS_PER_BATCH = 131_072
VENDORS = ["CMT", "VTS", "DDS", "MYC", "HVF", "CURB"]
PAYMENTS = ["card", "cash", "no_charge", "dispute", "voided"]
NOTE_WORDS = ["airport", "downtown", "late night", "rush hour", "scenic route", "stadium", "harbor", "midtown"]

_PRIME_1 = np.uint64(0x9E3779B185EBCA87)
_PRIME_2 = np.uint64(0xC2B2AE3D27D4EB4F)
_PRIME_3 = np.uint64(0x165667B19E3779F9)
_PRIME_4 = np.uint64(0x85EBCA77C2B2AE63)
_PRIME_5 = np.uint64(0x27D4EB2F165667C5)
_SPARK_SEED = np.uint64(42)


def _rotl(value: np.ndarray, bits: int) -> np.ndarray:
    return (value << np.uint64(bits)) | (value >> np.uint64(64 - bits))


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * _PRIME_2
    h = h ^ (h >> np.uint64(29))
    h = h * _PRIME_3
    return h ^ (h >> np.uint64(32))


def _id_hashes(ids: np.ndarray) -> np.ndarray:
    """Spark's XXH64 of each long id with seed 42: the seed of every column's salted hash."""
    with np.errstate(over="ignore"):
        h = _rotl(ids.astype(np.uint64) * _PRIME_2, 31)
        h *= _PRIME_1
        h ^= _SPARK_SEED + _PRIME_5 + np.uint64(8)
        h = _rotl(h, 27)
        h *= _PRIME_1
        h += _PRIME_4
        return _fmix(h)


class _SaltedHashes:
    """``abs(xxhash64(id, salt))`` exactly as Spark computes it (XXH64 of the int salt seeded with the
    id's hash), for one batch of ids: computed in place, with one scratch array for the whole batch."""

    def __init__(self, ids: np.ndarray):
        self._seeds = _id_hashes(ids)
        self._scratch = np.empty_like(self._seeds)

    def __call__(self, salt: int) -> np.ndarray:
        h, scratch = self._seeds + (_PRIME_5 + np.uint64(4)), self._scratch
        with np.errstate(over="ignore"):
            h ^= np.uint64(salt & 0xFFFFFFFF) * _PRIME_1
            np.left_shift(h, np.uint64(23), out=scratch)
            h >>= np.uint64(41)
            h |= scratch
            h *= _PRIME_2
            h += _PRIME_3
            for shift, prime in ((33, _PRIME_2), (29, _PRIME_3), (32, None)):
                np.right_shift(h, np.uint64(shift), out=scratch)
                h ^= scratch
                if prime is not None:
                    h *= prime
        signed = h.view(np.int64)
        return np.abs(signed, out=signed)


def _pick(options: list[str], hashes: np.ndarray) -> pa.Array:
    return pc.take(pa.array(options), pa.array(hashes % len(options)))


def _half_up_cents(numerator: np.ndarray, denominator: int) -> np.ndarray:
    """``round(numerator / denominator)`` with halves rounded up (numerator ≥ 0), in integers."""
    return (2 * numerator + denominator) // (2 * denominator)


def _decimal_from_cents(cents: np.ndarray) -> pa.Array:
    """decimal(10,2) values from non-negative integer cents (the unscaled values, no float step)."""
    unscaled = np.zeros((len(cents), 2), dtype=np.int64)
    unscaled[:, 0] = cents
    return pa.Array.from_buffers(pa.decimal128(10, 2), len(cents), [None, pa.py_buffer(unscaled.tobytes())])


ZONES = 265
# The end of every note, "… via <word> zone <pickup zone>", for each (word, zone): one take per batch.
_NOTE_ENDINGS = pa.array([f" via {word} zone {zone}" for word in NOTE_WORDS for zone in range(1, ZONES + 1)])


def generate_arrow(start: int, end: int) -> pa.Table:
    """Every generator column for ids ``[start, end)`` (see the module doc)."""
    ids = np.arange(start, end, dtype=np.int64)
    hashes = _SaltedHashes(ids)
    micros = BASE_TIME_MICROS + ids * MICROS_BETWEEN_ROWS
    distance_cents = hashes(5) % 4000 + 30
    fare_cents = 300 + _half_up_cents(distance_cents * 11, 4)  # 3.00 + distance * 2.75
    tip_percent = np.where(hashes(9) % 3 == 0, 0, hashes(10) % 25)
    tip_cents = _half_up_cents(fare_cents * tip_percent, 100)
    pickup = hashes(2) % ZONES + 1
    note_ending = (hashes(12) % len(NOTE_WORDS)) * ZONES + (pickup - 1)
    note_ending_or_null = _NOTE_ENDINGS.take(pa.array(note_ending, mask=hashes(11) % 4 == 0))
    columns = {
        "id": pa.array(ids),
        "ts": pa.array(micros, pa.timestamp("us", tz="UTC")),
        "vendor": _pick(VENDORS, hashes(1)),
        "pickup_zone": pa.array(pickup.astype(np.int32)),
        "dropoff_zone": pa.array((hashes(3) % ZONES + 1).astype(np.int32)),
        "passenger_count": pa.array((hashes(4) % 6 + 1).astype(np.int32)),
        "trip_distance": pa.array(distance_cents / 100.0),
        "fare_amount": _decimal_from_cents(fare_cents),
        "tip_amount": pa.array(tip_cents / 100.0),
        "total_amount": pa.array((fare_cents + tip_cents + 50) / 100.0),
        "payment_type": _pick(PAYMENTS, hashes(6)),
        "rate_code": pa.array((hashes(7) % 6 + 1).astype(np.int32)),
        "store_and_forward": pa.array(hashes(8) % 50 == 0),
        "pickup_date": pa.array((micros // MICROS_PER_DAY).astype(np.int32), pa.date32()),
        # "trip <id> via <word> zone <pickup zone>", null for a quarter of the rows.
        "notes": pc.binary_join_element_wise("trip ", pa.array(ids).cast(pa.string()), note_ending_or_null, ""),
    }
    assert list(columns) == [column.name for column in GENERATOR_COLUMNS]
    return pa.table(columns)


def generate(spark_range: DataFrame) -> DataFrame:
    """Generator rows for the ids of ``spark_range`` (a DataFrame with an ``id`` column, consecutive per
    partition as ``spark.range`` makes them), for Spark-side readers and peers of the benchmark."""
    from icebergsync.schema import spark_ddl

    def rows(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            ids = batch.column("id")
            if len(ids):
                first, last = ids[0].as_py(), ids[len(ids) - 1].as_py()
                assert last - first + 1 == len(ids), "generate() needs consecutive ids"
                yield from generate_arrow(first, last + 1).to_batches()

    return spark_range.mapInArrow(rows, spark_ddl(list(GENERATOR_COLUMNS)))


@dataclass(frozen=True)
class GeneratorReader:
    """Reads generator units in the tasks: the declared columns of each id range."""

    columns: tuple[str, ...]

    def __call__(self, unit: WorkUnit, stats: UnitStats) -> Iterator[pa.RecordBatch]:
        assert isinstance(unit, GeneratorUnit)
        for start in range(unit.start, unit.end, ROWS_PER_BATCH):
            yield from generate_arrow(start, min(unit.end, start + ROWS_PER_BATCH)).select(self.columns).to_batches()


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
            full=rows >= limit,
        )

    def plan_units(self, frontier: Frontier, pending: Pending) -> list[WorkUnit]:
        start, end = int(frontier["next_id"]), int(pending.end["next_id"])
        count = self.parallelism(pending.estimated_bytes)
        bounds = [start + (end - start) * i // count for i in range(count + 1)]
        return [GeneratorUnit(i, lo, hi) for i, (lo, hi) in enumerate(itertools.pairwise(bounds)) if hi > lo]

    def record_columns(self) -> list[SpecColumn]:
        return list(GENERATOR_COLUMNS)

    def unit_reader(self, columns: list[SpecColumn], key: list[str] | None = None,
                    truncated_at: Position | None = None) -> UnitReader:
        return GeneratorReader(tuple(column.name for column in columns))

    def backlog(self, frontier: Frontier, pending: Pending | None,
                owns: Callable[[str], bool] | None = None) -> dict[str, Any]:
        """The rows produced so far beyond the frontier: the range's and those after it."""
        if pending is None:
            return {"records": 0}
        return {"records": int(pending.end["next_id"]) - int(frontier["next_id"]) + (pending.lag or {})["records"]}

    def exhausted(self, frontier: Frontier) -> bool:
        return self.settings.exhausted(frontier)
