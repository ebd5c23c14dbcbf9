"""The job's metrics without Spark: lag in seconds that tells idle from stuck, per-partition lag that returns to 0,
every documented series exposed from the start, and the sources' backlog beyond a frontier."""

from __future__ import annotations

from pathlib import Path

import yaml
from prometheus_client import generate_latest

from icebergsync.errors import BadInputError, CatalogUnreachableError, FencedError, ProgressConflictError
from icebergsync.metrics.names import JOB_METRICS, STOP_REASONS
from icebergsync.spec import parse_spec
from spark_app.job.loop import stop_reason
from spark_app.job.metrics import JobMetrics
from spark_app.job.metrics.freshness import Freshness
from spark_app.sources.files import FilesSource
from spark_app.upkeep.runner import UpkeepTotals
from tests.unit.test_files_late_notes import no_spark


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_an_idle_table_has_no_lag_seconds_and_a_waiting_backlog_counts_from_its_arrival_or_the_last_commit() -> None:
    clock = Clock(1000.0)
    fresh = Freshness(clock)
    fresh.committed(990.0, "1970-01-01T00:16:00+00:00", 0)
    fresh.saw_backlog(0)
    clock.now = 5000.0  # hours without a commit, nothing to commit: idle, not stuck
    assert (fresh.wall_seconds(), fresh.event_seconds()) == (0.0, 0.0)
    fresh.saw_backlog(40)  # records arrive
    clock.now = 5600.0
    fresh.saw_backlog(40)
    assert fresh.wall_seconds() == 600.0  # stuck once this passes the alert's threshold
    assert fresh.event_seconds() == 5600.0 - 960.0
    fresh.committed(5610.0, None, 10)  # a commit that leaves a backlog restarts the count
    clock.now = 5620.0
    assert fresh.wall_seconds() == 10.0
    fresh.committed(5630.0, None, 0)  # caught up
    assert fresh.wall_seconds() == 0.0


def test_every_documented_series_is_exposed_and_a_drained_partition_returns_to_zero() -> None:
    metrics = JobMetrics("data/orders", 3, UpkeepTotals(failures=2))
    metrics.backlog("lake.orders", {"records": 7, "partitions": {"orders": {"0": 5, "1": 2}}})
    metrics.committed("lake.orders", 1_700_000_000_000, 0.2, records=90, dead_letters=1, committed_bytes=4096,
                      max_event_time=None, source_lag={"records": 0, "partitions": {}})
    text = generate_latest(metrics.registry).decode()
    for metric in JOB_METRICS:
        assert f"\n{metric.name}{'_bucket' if metric.kind == 'histogram' else ''}{{" in text, metric.name
    assert 'icebergsync_job_source_partition_lag_records{partition="0",sink="data/orders",table="lake.orders",' \
           'topic="orders"} 0.0' in text
    assert 'icebergsync_job_upkeep_failures_total{sink="data/orders"} 2.0' in text
    assert 'icebergsync_job_stops_total{reason="fenced",sink="data/orders"} 0.0' in text
    assert 'icebergsync_job_last_commit_timestamp_seconds{sink="data/orders",table="lake.orders"} 1.7e+09' in text


def test_the_files_backlog_counts_the_files_of_the_range_and_those_after_it(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for name in ("0001.json", "0002.json", "0003.json"):
        (inbox / name).write_text('{"id": 1}\n')
    sync = parse_spec({
        "apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "metadata": {"name": "f", "namespace": "t"},
        "spec": {"source": {"files": {"path": str(inbox), "maxFilesPerTrigger": 2}},
                 "schema": [{"name": "id", "type": "long"}], "table": {"name": "a.b"}}})
    source = FilesSource(no_spark, sync.spec)  # type: ignore[arg-type]
    pending = source.pending({"after": ""}, 1 << 30)
    assert pending is not None and pending.lag == {"files": 1}  # what the commit records: after its range
    assert source.backlog({"after": ""}, pending) == {"files": 3}
    assert source.backlog({"after": "0003.json"}, None) == {"files": 0}


def test_operations_doc_lists_every_metric_and_alert() -> None:
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "operations.md").read_text()
    for metric in JOB_METRICS:
        assert f"| `{metric.name}` | {metric.kind} |" in doc, metric.name
    alerts = yaml.safe_load((root / "charts" / "icebergsync" / "files" / "alerts.yaml").read_text())
    for rule in alerts["groups"][0]["rules"]:
        assert f"| `{rule['alert']}` |" in doc, rule["alert"]


def test_each_stop_of_a_run_has_its_documented_reason() -> None:
    stops = [FencedError("s", 1, 2), ProgressConflictError("x"), BadInputError("x"), CatalogUnreachableError("x"),
             RuntimeError("x")]
    assert tuple(stop_reason(stop) for stop in stops) == STOP_REASONS
