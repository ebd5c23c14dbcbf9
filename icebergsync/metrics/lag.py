"""The source lag, defined once: what the job records with each commit (``icebergsync.source-lag``), serves as
metrics, and what the operator's status, the LAG column and ``icebergsync status`` show.

A lag is a JSON object of counts by unit: ``records`` (Kafka: each partition's end offset minus the frontier's
offset, summed, with ``partitions`` the per-partition detail; the generator: rows produced and not committed) or
``files`` (the files source: files listed and not committed, with ``directories`` by directory).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Offsets = Mapping[tuple[str, int], int]


def is_count(value: object) -> bool:
    """Whether ``value`` is one of a lag's counts (not its per-partition or per-directory detail)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def kafka_lag(log_ends: Offsets, positions: Offsets) -> dict[str, Any]:
    """The lag of Kafka partitions read up to ``positions``: ``records`` (each partition's end offset minus its
    position, never below 0, summed) and ``partitions`` ({topic: {partition: end - position}})."""
    by_partition: dict[str, dict[str, int]] = {}
    for (topic, partition), end in log_ends.items():
        by_partition.setdefault(topic, {})[str(partition)] = end - positions.get((topic, partition), end)
    return partitions_lag(by_partition)


def partitions_lag(by_partition: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """A Kafka lag from its per-partition detail ({topic: {partition: records}}): ``records`` is their sum, a
    partition read past its end (negative) counting 0."""
    return {"records": sum(max(0, n) for parts in by_partition.values() for n in parts.values()),
            "partitions": {topic: dict(parts) for topic, parts in by_partition.items()}}


def counts(source_lag: Mapping[str, Any] | None) -> dict[str, float]:
    """The counts of a lag by unit (``{"records": 40}``), its detail left out."""
    return {unit: value for unit, value in (source_lag or {}).items() if is_count(value)}


def backlog(source_lag: Mapping[str, Any] | None) -> float | None:
    """The lag as one number (its counts added up); None when no lag was reported."""
    if not source_lag:
        return None
    return float(sum(counts(source_lag).values()))


def total(lags: Iterable[Mapping[str, Any] | None]) -> dict[str, float]:
    """Several tables' lags added up, per unit."""
    summed: dict[str, float] = {}
    for lag in lags:
        for unit, value in counts(lag).items():
            summed[unit] = summed.get(unit, 0) + value
    return summed


def lag_text(source_lag: Mapping[str, Any] | None) -> str | None:
    """A lag for humans and the LAG column: ``{"records": 1200, "partitions": …}`` is ``1200 records``."""
    return ", ".join(f"{value} {unit}" for unit, value in sorted(counts(source_lag).items())) or None
