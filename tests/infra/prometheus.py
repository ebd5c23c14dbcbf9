"""Prometheus and promtool from Debian's package (scripts/infra/prometheus.sh), for the metrics tests.

:func:`prometheus_binaries` fetches them into the cache once per session; :func:`start_prometheus` runs a
Prometheus on 127.0.0.1 that scrapes the given targets every second and evaluates the given rules files, under
the suite's server lifetime (:class:`tests.infra.services.ServerProcess`), stopped with ``stop()``.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.infra.services import HOST, REPO_ROOT, ServerProcess, ensure_services, free_port


@dataclass(frozen=True)
class PrometheusBinaries:
    prometheus: Path
    promtool: Path


def prometheus_binaries() -> PrometheusBinaries:
    """The unpacked ``prometheus`` and ``promtool`` (fetched on first use)."""
    ensure_services("prometheus")
    out = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "infra" / "prometheus.sh"), "--env"], check=True,
                         capture_output=True, text=True, timeout=600).stdout
    paths = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return PrometheusBinaries(Path(paths["PROMETHEUS_BIN"]), Path(paths["PROMTOOL_BIN"]))


class Prometheus:
    """A running Prometheus: its HTTP API on ``url``."""

    def __init__(self, server: ServerProcess, port: int):
        self.server, self.url = server, f"http://{HOST}:{port}"

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``'s data (raises on an error status)."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` gives now."""
        return list(self.api("query", query=expr)["result"])

    def stop(self) -> None:
        self.server.stop()


def start_prometheus(workdir: Path, targets: list[str], rule_files: list[Path]) -> Prometheus:
    """A Prometheus scraping ``targets`` (host:port) every second, with ``rule_files``, ready to query."""
    binaries = prometheus_binaries()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [{"job_name": "icebergsync", "static_configs": [{"targets": targets}]}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    server = ServerProcess("prometheus", [
        str(binaries.prometheus), f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address={HOST}:{port}",
    ], workdir / "prometheus.log", cwd=workdir)
    prometheus = Prometheus(server, port)
    try:
        server.wait_until(lambda: prometheus.api("status/runtimeinfo") is not None, 60, "its HTTP API")
    except BaseException:
        server.stop()
        raise
    return prometheus
