"""The chart's alerts (charts/icebergsync/files/alerts.yaml) under the real ``promtool`` (Debian's Prometheus
2.42): valid rules, the timing cases of tests/unit/resources/alert_rules_test.yaml (an idle sync fires nothing, a
stuck one fires IcebergSyncStuck, …), and the chart's PrometheusRule, PodMonitor and dashboard as rendered."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml
from icebergsync_operator import metrics as operator_metrics

from icebergsync.metrics.names import JOB_METRICS
from tests.infra.prometheus import prometheus_binaries
from tests.unit.test_chart import CHART, one, render

ALERTS = CHART / "files" / "alerts.yaml"
DASHBOARD = CHART / "files" / "dashboard.json"
RULE_TESTS = Path(__file__).parent / "resources" / "alert_rules_test.yaml"
METRIC_NAME = re.compile(r"\b(icebergsync_[a-z_]+)")


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(prometheus_binaries().promtool), *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, check=False)


def test_promtool_checks_the_rules_and_their_unit_tests_pass() -> None:
    checked = _promtool("check", "rules", str(ALERTS), cwd=CHART)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = _promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_is_tested_idle_and_queries_only_metrics_that_exist() -> None:
    rules = [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]
    idle_case = yaml.safe_load(RULE_TESTS.read_text())["tests"][0]
    assert {case["alertname"] for case in idle_case["alert_rule_test"] if case["exp_alerts"] == []} \
        == {rule["alert"] for rule in rules}
    exposed = {metric.name.removesuffix("_total") for metric in JOB_METRICS} | {
        collector._name for collector in (operator_metrics.RECONCILES, operator_metrics.LAUNCHES,
                                          operator_metrics.FAILURES, operator_metrics.SECONDS_SINCE_COMMIT,
                                          operator_metrics.SINK_VERSION, operator_metrics.CATALOG_UNREACHABLE)}
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [rule["expr"] for rule in rules] + [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for query in queries:
        for name in METRIC_NAME.findall(query):
            assert re.sub(r"_(total|bucket|sum|count)$", "", name) in exposed, f"{name} in {query!r} is no metric"


def test_the_chart_renders_the_rule_monitor_and_dashboard_only_when_asked(helm_binary: Path, tmp_path: Path) -> None:
    kinds = {doc["kind"] for doc in render(helm_binary, tmp_path)}
    assert not kinds & {"PodMonitor", "PrometheusRule"}
    docs = render(helm_binary, tmp_path, {"watchNamespaces": ["data"], "jobMetrics": {
        "podMonitor": {"enabled": True, "labels": {"release": "prom"}}, "prometheusRule": {"enabled": True},
        "dashboard": {"enabled": True}}})
    rule = one(docs, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(ALERTS.read_text())
    monitor = one(docs, "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "icebergsync",
                                                          "spark-role": "driver"}
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["data"]}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"  # the driver's port (render.py)
    dashboards = [doc for doc in docs if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-dashboard")]
    assert len(dashboards) == 1 and dashboards[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboards[0]["data"]["icebergsync.json"]) == json.loads(DASHBOARD.read_text())
