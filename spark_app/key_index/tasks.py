"""A locate's key-column reads as Spark tasks: the executors read, the driver gets positions back.

When the row groups a trigger's keys may be in hold many rows (keys spread over a large table), the
driver only plans (bounds, statistics, Bloom filters: :func:`.locate.plan_reads`) and the reads are
dealt to the executors, balanced by rows; each task returns the positions it found, so what comes
back to the driver is bounded by the rows the trigger touches, not by the rows read.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyiceberg.io import load_file_io
from pyspark.sql import SparkSession

from spark_app import merge
from spark_app.key_index.reads import Candidate, read_candidates


def read_in_tasks(spark: SparkSession, io_properties: dict[str, str], location: str, candidates: Sequence[Candidate],
                  keys: pa.Table) -> list[tuple[str, np.ndarray]]:
    """:func:`.reads.read_candidates` of ``candidates``, run as at most one Spark task per core."""
    if not candidates:
        return []
    assignments = merge.spread(list(candidates), spark.sparkContext.defaultParallelism)
    payloads = spark.sparkContext.parallelize(assignments, len(assignments)).mapPartitions(
        _read_function(io_properties, location, keys)).collect()
    return [found for payload in payloads for found in pickle.loads(payload)]


def _read_function(io_properties: dict[str, str], location: str,
                   keys: pa.Table) -> Callable[[Iterable[list[Candidate]]], Iterator[bytes]]:
    def read(assignments: Iterable[list[Candidate]]) -> Iterator[bytes]:
        io = load_file_io(io_properties, location)
        for candidates in assignments:
            yield pickle.dumps(read_candidates(io, candidates, keys))

    return read
