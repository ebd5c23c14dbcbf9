"""The job's metrics as a real Prometheus (Debian's 2.42) scrapes them from a running Kafka sync on 127.0.0.1, with
the chart's alerts loaded: every documented metric is there, every dashboard panel's query returns data, the idle
sync fires no alert, and records waiting for a commit show as a backlog whose seconds grow (what IcebergSyncStuck
fires on, its timing tested by promtool in tests/unit/test_alert_rules.py)."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from icebergsync.metrics.names import JOB_METRICS
from icebergsync.spec import parse_spec
from spark_app.job.loop import SyncJob
from spark_app.job.metrics import serve
from tests.infra.prometheus import Prometheus, start_prometheus
from tests.infra.services import HOST, KafkaBroker, free_port
from tests.integration.kafka_support import kafka_document, last_frontier, new_topic, produce_orders
from tests.integration.sync_support import BackgroundJob, catalog_of

CHART_FILES = Path(__file__).resolve().parents[2] / "charts" / "icebergsync" / "files"
SINK = 'sink="test/orders"'


def _value(prometheus: Prometheus, expr: str) -> float | None:
    result = prometheus.query(expr)
    return float(result[0]["value"][1]) if result else None


def _exposed_names(prometheus: Prometheus) -> set[str]:
    return {item["metric"]["__name__"] for item in prometheus.query('count by (__name__) ({__name__=~"icebergsync_job_.+"})')}


def test_prometheus_scrapes_every_metric_the_dashboard_and_alerts_use(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 2)
    produce_orders(kafka_broker, topic, range(299))
    kafka_broker.produce(topic, [("k", "{broken", 0)])  # a dead letter, below the alert's 1%
    # Full triggers (100 records) commit at once; a smaller backlog waits for the interval (a minute).
    sync = parse_spec(kafka_document(tmp_path, kafka_broker, topic, source={"maxRecordsPerTrigger": 100},
                                     commit={"interval": "60s"}, deadLetter={"table": "sales.orders_dlq"}))
    catalog = catalog_of(sync)
    job = SyncJob(sync, 1, spark)
    port = free_port()
    server = serve(job.metrics, port, HOST)
    (tmp_path / "prometheus").mkdir()
    prometheus = start_prometheus(tmp_path / "prometheus", [f"{HOST}:{port}"], [CHART_FILES / "alerts.yaml"])
    try:
        with BackgroundJob(job) as running:
            ends = {topic: {str(p): o for p, o in kafka_broker.end_offsets(topic).items()}}
            running.wait_until(lambda: last_frontier(catalog.load_table("sales.orders")) == ends, "every offset committed")
            # Idle: Prometheus has the commits and a zero backlog, with rates over several scrapes.
            running.wait_until(lambda: _value(prometheus, f"sum(icebergsync_job_records_committed_total{{{SINK}}})") == 299
                               and _value(prometheus, f"sum(icebergsync_job_dead_letters_total{{{SINK}}})") == 1
                               and _value(prometheus, f'icebergsync_job_source_lag{{{SINK},unit="records"}}') == 0
                               and (_value(prometheus, f"count_over_time(icebergsync_job_commits_total{{{SINK}}}[5m])")
                                    or 0) >= 3, "Prometheus to scrape the idle sync")

            exposed = _exposed_names(prometheus)
            for metric in JOB_METRICS:
                assert (metric.name + "_bucket" if metric.kind == "histogram" else metric.name) in exposed, metric.name
            assert _value(prometheus, f'sum(icebergsync_job_source_partition_lag_records{{{SINK}}})') == 0
            assert _value(prometheus, f'icebergsync_job_source_lag_seconds{{{SINK},clock="wall"}}') == 0

            dashboard = json.loads((CHART_FILES / "dashboard.json").read_text())
            for panel in dashboard["panels"]:
                for target in panel["targets"]:
                    assert prometheus.query(target["expr"]), f"panel {panel['title']!r}: no data for {target['expr']}"

            rules = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
            assert len(rules) == 6 and all(rule["health"] == "ok" for rule in rules), rules
            assert prometheus.query("ALERTS") == []  # an idle sync: nothing pending, nothing firing

            # Records arrive and wait (not a full trigger, the interval not up): a backlog, its seconds growing,
            # no commit. Idle and waiting are different series values.
            commits = _value(prometheus, f"sum(icebergsync_job_commits_total{{{SINK}}})")
            produce_orders(kafka_broker, topic, range(1000, 1010))
            wall = f'icebergsync_job_source_lag_seconds{{{SINK},clock="wall"}}'
            running.wait_until(lambda: _value(prometheus, f'icebergsync_job_source_lag{{{SINK},unit="records"}}') == 10
                               and (_value(prometheus, wall) or 0) >= 2, "the waiting backlog scraped")
            assert _value(prometheus, f"sum(icebergsync_job_commits_total{{{SINK}}})") == commits
            assert _value(prometheus, f"sum(icebergsync_job_source_partition_lag_records{{{SINK}}})") == 10
    finally:
        prometheus.stop()
        server.shutdown()
