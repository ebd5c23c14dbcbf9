"""A locate's key-column reads as Spark tasks: the executors read, the driver gets positions back.

When the row groups a trigger's keys may be in hold many rows (keys spread over a large table), the
driver only plans (bounds, statistics, Bloom filters: :func:`.locate.plan_reads`) and the reads are
dealt to the executors, balanced by rows; each task returns the positions it found, so what comes
back to the driver is bounded by the rows the trigger touches, not by the rows read.
:func:`run_in_tasks` is the dealing, for any read of this kind (also :mod:`spark_app.commit.carry.live_rows`).
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, TypeVar

import numpy as np
import pyarrow as pa
from pyiceberg.io import load_file_io
from pyspark.sql import SparkSession

from spark_app.commit.key_index.reads import Candidate, read_candidates
from spark_app.staging import packing


class _Sized(Protocol):
    @property
    def size(self) -> int: ...


S = TypeVar("S", bound=_Sized)
R = TypeVar("R")


def run_in_tasks(spark: SparkSession, items: Sequence[S], read: Callable[[list[S]], list[R]]) -> list[R]:
    """``read`` of ``items`` (picklable, like ``read``), dealt by size to at most one Spark task per core."""
    if not items:
        return []
    assignments = packing.spread(list(items), spark.sparkContext.defaultParallelism)

    def run(parts: Iterable[list[S]]) -> Iterator[bytes]:
        for part in parts:
            yield pickle.dumps(read(part))

    payloads = spark.sparkContext.parallelize(assignments, len(assignments)).mapPartitions(run).collect()
    return [found for payload in payloads for found in pickle.loads(payload)]


def read_in_tasks(spark: SparkSession, io_properties: dict[str, str], location: str, candidates: Sequence[Candidate],
                  keys: pa.Table) -> list[tuple[str, np.ndarray]]:
    """:func:`.reads.read_candidates` of ``candidates``, run as at most one Spark task per core."""
    return run_in_tasks(spark, candidates, functools.partial(_read, io_properties, location, keys))


def _read(io_properties: dict[str, str], location: str, keys: pa.Table,
          candidates: list[Candidate]) -> list[tuple[str, np.ndarray]]:
    return read_candidates(load_file_io(io_properties, location), candidates, keys)
