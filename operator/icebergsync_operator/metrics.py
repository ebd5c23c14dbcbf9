"""Prometheus metrics of the operator (served on --metrics-port)."""

from __future__ import annotations

import contextlib

from prometheus_client import Counter, Gauge, start_http_server

RECONCILES = Counter("icebergsync_operator_reconciles", "Reconciles of IcebergSyncs, by result.", ["result"])
LAUNCHES = Counter("icebergsync_operator_launches", "SparkApplications launched, by reason.", ["reason"])
FAILURES = Counter("icebergsync_operator_failures", "Job failures observed, by kind (Failed, Fenced).", ["reason"])
SECONDS_SINCE_COMMIT = Gauge("icebergsync_sync_seconds_since_last_commit",
                             "Age of the newest snapshot committed by the sync's sink.", ["namespace", "name"])
SINK_VERSION = Gauge("icebergsync_sync_sink_version", "Current sink version of the sync.", ["namespace", "name"])
CATALOG_UNREACHABLE = Gauge("icebergsync_sync_catalog_unreachable",
                            "1 while the operator cannot read the sync's table (CatalogUnreachable, WaitingForCatalog).",
                            ["namespace", "name"])


def serve(port: int, address: str) -> None:
    """Start the HTTP endpoint in a background thread (port 0: no endpoint)."""
    if port:
        start_http_server(port, addr=address)


def forget_sync(namespace: str, name: str) -> None:
    """Drop the per-sync series of a deleted sync."""
    for gauge in (SECONDS_SINCE_COMMIT, SINK_VERSION, CATALOG_UNREACHABLE):
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, name)
