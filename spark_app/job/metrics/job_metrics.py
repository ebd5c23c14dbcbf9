"""The job's series, in a registry of its own, and what the driver loop reports to them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from icebergsync.metrics import lag, names
from spark_app.job.metrics.freshness import Freshness
from spark_app.upkeep.runner import UpkeepTotals

UPKEEP_WORK = ("runs", "data_files_rewritten", "bytes_rewritten", "delete_files_removed", "manifests_rewritten",
               "snapshots_expired", "orphans_removed")
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def _counter(metric: names.MetricName, registry: CollectorRegistry) -> Counter:
    return Counter(metric.base, metric.help, list(metric.labels), registry=registry)


def _gauge(metric: names.MetricName, registry: CollectorRegistry) -> Gauge:
    return Gauge(metric.base, metric.help, list(metric.labels), registry=registry)


def _histogram(metric: names.MetricName, registry: CollectorRegistry) -> Histogram:
    return Histogram(metric.base, metric.help, list(metric.labels), buckets=DURATION_BUCKETS, registry=registry)


class _UpkeepCollector(Collector):
    """The maintenance totals the job keeps anyway (UpkeepTotals), read at each scrape."""

    def __init__(self, sink: str, totals: UpkeepTotals):
        self.sink, self.totals = sink, totals

    def collect(self) -> Iterator[CounterMetricFamily]:
        work = CounterMetricFamily(names.UPKEEP_WORK.base, names.UPKEEP_WORK.help, labels=list(names.UPKEEP_WORK.labels))
        for name in UPKEEP_WORK:
            work.add_metric([self.sink, name], getattr(self.totals, name))
        yield work
        failures = CounterMetricFamily(names.UPKEEP_FAILURES.base, names.UPKEEP_FAILURES.help,
                                       labels=list(names.UPKEEP_FAILURES.labels))
        failures.add_metric([self.sink], self.totals.failures)
        yield failures


class JobMetrics:
    """One attempt's metrics (labelled with its sink id); :func:`serve` exposes ``registry``."""

    def __init__(self, sink: str, version: int, upkeep: UpkeepTotals):
        self.sink = sink
        self.registry = CollectorRegistry()
        registry = self.registry
        self.records_read = _counter(names.RECORDS_READ, registry)
        self.source_bytes_read = _counter(names.SOURCE_BYTES_READ, registry)
        self.records_committed = _counter(names.RECORDS_COMMITTED, registry)
        self.bytes_committed = _counter(names.BYTES_COMMITTED, registry)
        self.dead_letters = _counter(names.DEAD_LETTERS, registry)
        self.commits = _counter(names.COMMITS, registry)
        self.stops = _counter(names.STOPS, registry)
        self.commit_duration = _histogram(names.COMMIT_DURATION, registry)
        self.trigger_phase = _histogram(names.TRIGGER_PHASE, registry)
        self.last_commit = _gauge(names.LAST_COMMIT, registry)
        self.source_lag = _gauge(names.SOURCE_LAG, registry)
        self.partition_lag = _gauge(names.PARTITION_LAG, registry)
        self.lag_seconds = _gauge(names.LAG_SECONDS, registry)
        _gauge(names.SINK_VERSION, registry).labels(sink).set(version)
        registry.register(_UpkeepCollector(sink, upkeep))
        self.source_bytes_read.labels(sink)
        for reason in names.STOP_REASONS:  # every series exists from the start, at 0
            self.stops.labels(sink, reason)
        for phase in names.PHASES:
            self.trigger_phase.labels(sink, phase)
        self._freshness: dict[str, Freshness] = {}
        self._partitions: dict[str, set[tuple[str, str]]] = {}

    def freshness(self, table: str) -> Freshness:
        """The table's freshness, its series created on first use."""
        found = self._freshness.get(table)
        if found is None:
            found = self._freshness[table] = Freshness()
            for series in (self.records_read, self.records_committed, self.bytes_committed, self.dead_letters,
                           self.commits):
                series.labels(self.sink, table)
            self.lag_seconds.labels(self.sink, table, "wall").set_function(found.wall_seconds)
            self.lag_seconds.labels(self.sink, table, "event").set_function(found.event_seconds)
        return found

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time one phase of a trigger (plan, stage, commit, upkeep)."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.trigger_phase.labels(self.sink, name).observe(time.monotonic() - started)

    def resumed(self, table: str, committed_at_ms: int | None, max_event_time: str | None) -> None:
        """What the table says of the sink's newest commit when the job takes it up (its fence, with the
        freshness it carries)."""
        if committed_at_ms is not None:
            self.freshness(table).committed(committed_at_ms / 1000, max_event_time, None)
            self.last_commit.labels(self.sink, table).set(committed_at_ms / 1000)

    def read(self, source_bytes: int) -> None:
        """A trigger's range of ``source_bytes`` (as the source sizes it) was read."""
        self.source_bytes_read.labels(self.sink).inc(source_bytes)

    def staged(self, table: str, records: int) -> None:
        """``records`` of a trigger were read and staged for ``table``."""
        self.freshness(table)
        self.records_read.labels(self.sink, table).inc(records)

    def backlog(self, table: str, source_lag: Mapping[str, Any]) -> None:
        """The source's lag beyond ``table``'s frontier now (icebergsync.metrics.lag)."""
        counts = lag.counts(source_lag)
        for unit, value in counts.items():
            self.source_lag.labels(self.sink, table, unit).set(value)
        self.freshness(table).saw_backlog(sum(counts.values()))
        if "partitions" in source_lag:
            self._partition_backlog(table, source_lag["partitions"])

    def _partition_backlog(self, table: str, by_partition: Mapping[str, Mapping[str, int]]) -> None:
        seen = {(topic, partition) for topic, parts in by_partition.items() for partition in parts}
        known = self._partitions.setdefault(table, set())
        for topic, partition in known - seen:  # nothing pending there now
            self.partition_lag.labels(self.sink, table, topic, partition).set(0)
        for topic, parts in by_partition.items():
            for partition, records in parts.items():
                self.partition_lag.labels(self.sink, table, topic, partition).set(max(0, records))
        known |= seen

    def committed(self, table: str, at_ms: int, commit_seconds: float, records: int, dead_letters: int,
                  committed_bytes: int, max_event_time: str | None, source_lag: Mapping[str, Any] | None) -> None:
        """A data commit of ``table`` landed (``source_lag``: the backlog it recorded, beyond its frontier)."""
        self.commits.labels(self.sink, table).inc()
        self.commit_duration.labels(self.sink, table).observe(commit_seconds)
        self.records_committed.labels(self.sink, table).inc(records)
        self.dead_letters.labels(self.sink, table).inc(dead_letters)
        self.bytes_committed.labels(self.sink, table).inc(committed_bytes)
        self.last_commit.labels(self.sink, table).set(at_ms / 1000)
        if source_lag is not None:
            self.backlog(table, source_lag)
        self.freshness(table).committed(at_ms / 1000, max_event_time, lag.backlog(source_lag))

    def stopped(self, reason: str) -> None:
        """The run stops on an error of kind ``reason``."""
        self.stops.labels(self.sink, reason).inc()


def serve(metrics: JobMetrics, port: int, address: str) -> Any:
    """Serve ``metrics`` on ``address:port`` at /metrics in a background thread; the server (``shutdown()``)."""
    server, _thread = start_http_server(port, addr=address, registry=metrics.registry)
    return server

