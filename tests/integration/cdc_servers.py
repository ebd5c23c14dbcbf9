"""What the PostgreSQL and MariaDB CDC fixtures share: the unpacked server's paths, running it as an ordinary
user, and Debezium's embedded engine writing JSON change events to the suite's Kafka broker.

The runner is scripts/infra/debezium/src (``DebeziumToKafka``), compiled by ``scripts/infra/services.sh``
against each connector's own classpath: ``debezium`` (the PostgreSQL connector) or ``debezium-mariadb``
(the MariaDB connector, whose engine is of its own version).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.infra.services import (
    JAVA,
    REPO_ROOT,
    SMALL_JVM,
    KafkaBroker,
    ServerProcess,
    cache_dir,
    ensure_services,
)

# Database servers refuse to run as root (PostgreSQL) or need to be told to (MariaDB): as root they run in a
# user namespace that maps the caller to an ordinary uid, so they can still read the cache under ``$HOME``
# and own their data directory.
AS_ORDINARY_USER = ["unshare", "--user", "--map-user=1000", "--map-group=1000"] if os.geteuid() == 0 else []


def server_paths(part: str) -> dict[str, str]:
    """The ``NAME=path`` lines ``scripts/infra/<part>.sh --env`` prints (after ``services.sh <part>`` filled the cache)."""
    ensure_services(part)
    out = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "infra" / f"{part}.sh"), "--env"],
                         check=True, capture_output=True, text=True, timeout=600).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def start_debezium_runner(workdir: Path, part: str, classpath: str, broker: KafkaBroker,
                          config: Mapping[str, str]) -> ServerProcess:
    """The runner on the cache's ``classpath`` directory (which services.sh ``part`` fills) with ``config`` (the
    engine's and the connector's settings), producing to ``broker``; returns once the connector's task has
    started. Its properties file and log are ``debezium.properties`` and ``debezium.log`` under ``workdir``."""
    ensure_services(part)
    home = cache_dir() / classpath
    properties = workdir / "debezium.properties"
    settings = {**config, "kafka.bootstrap.servers": broker.bootstrap_servers}
    properties.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    log = workdir / "debezium.log"
    server = ServerProcess("debezium", [
        JAVA, *SMALL_JVM, "-Xmx384m", "-cp", f"{home / 'classes'}{os.pathsep}{home / 'lib'}/*",
        "icebergsync.testinfra.DebeziumToKafka", str(properties)], log, cwd=workdir)
    server.wait_until(lambda: "debezium: task started" in log.read_text(errors="replace"), 120, "the connector's task")
    return server
