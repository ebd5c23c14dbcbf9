"""PostgreSQL with logical decoding and Debezium's embedded engine, as servers of the suite.

Both come from the cache ``scripts/infra/services.sh postgres debezium`` fills (Debian's pinned
PostgreSQL packages, unpacked; Debezium from Maven Central) and run like every other test server
(:class:`tests.infra.services.ServerProcess`): on 127.0.0.1, under ``timeout``, killed when pytest
dies, stopped at the end.

PostgreSQL refuses to run as root; as root the server runs in a user namespace that maps the
caller to an ordinary uid, so it can read the cache under ``$HOME`` and owns its data directory.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg2
from psycopg2.extensions import connection as Connection

from tests.infra.services import (
    HOST,
    JAVA,
    REPO_ROOT,
    SMALL_JVM,
    KafkaBroker,
    ServerProcess,
    cache_dir,
    ensure_services,
    free_port,
)

USER = "icebergsync"
DATABASE = "postgres"
_AS_ORDINARY_USER = ["unshare", "--user", "--map-user=1000", "--map-group=1000"] if os.geteuid() == 0 else []


@dataclass
class Postgres:
    """A running server: ``connect()`` opens a psycopg2 connection to its database as a superuser."""

    port: int
    server: ServerProcess

    def connect(self) -> Connection:
        return psycopg2.connect(host=HOST, port=self.port, user=USER, dbname=DATABASE, connect_timeout=5)


def _postgres_env() -> dict[str, str]:
    ensure_services("postgres")
    out = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "infra" / "postgres.sh"), "--env"],
                         check=True, capture_output=True, text=True, timeout=600).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def start_postgres(workdir: Path) -> Postgres:
    """initdb a fresh cluster under ``workdir`` and start it with ``wal_level=logical`` (trust auth, loopback only)."""
    paths = _postgres_env()
    binary = Path(paths["POSTGRES_BIN"])
    env = {"LD_LIBRARY_PATH": paths["POSTGRES_LIB"], "TZ": "UTC"}
    data = workdir / "data"
    subprocess.run([*_AS_ORDINARY_USER, str(binary / "initdb"), "-D", str(data), "-U", USER, "--auth=trust",
                    "-E", "UTF8", "--locale=C.UTF-8"],
                   check=True, capture_output=True, timeout=120, env={**os.environ, **env})
    port = free_port()
    server = ServerProcess("postgres", [
        *_AS_ORDINARY_USER, str(binary / "postgres"), "-D", str(data), "-h", HOST, "-p", str(port),
        "-k", str(workdir), "-c", "wal_level=logical", "-c", "max_replication_slots=8", "-c", "max_wal_senders=8",
        "-c", "fsync=off", "-c", "timezone=UTC"], workdir / "postgres.log", env=env)
    postgres = Postgres(port, server)

    def accepts_connections() -> bool:
        postgres.connect().close()
        return True

    server.wait_until(accepts_connections, 60, "connections")
    return postgres


def start_debezium(workdir: Path, postgres: Postgres, broker: KafkaBroker, prefix: str, tables: list[str],
                   settings: Mapping[str, str]) -> ServerProcess:
    """Debezium's PostgreSQL connector (pgoutput) on ``public.<table>`` for each of ``tables``, writing JSON
    change events to ``<prefix>.public.<table>`` on ``broker`` (topics the caller created); ``settings``
    add to or override the connector's and the converter's (``converter.schemas.enable``, ...)."""
    ensure_services("debezium")
    home = cache_dir() / "debezium"
    config = {
        "name": prefix,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(workdir / "offsets.dat"),
        "offset.flush.interval.ms": "1000",
        "database.hostname": HOST, "database.port": str(postgres.port), "database.user": USER,
        "database.password": "unused", "database.dbname": DATABASE,
        "topic.prefix": prefix, "plugin.name": "pgoutput", "slot.name": prefix.replace("-", "_"),
        "publication.name": f"{prefix.replace('-', '_')}_publication", "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(f"public.{table}" for table in tables),
        "kafka.bootstrap.servers": broker.bootstrap_servers,
        **settings,
    }
    properties = workdir / "debezium.properties"
    properties.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
    log = workdir / "debezium.log"
    server = ServerProcess("debezium", [
        JAVA, *SMALL_JVM, "-Xmx384m", "-cp", f"{home / 'classes'}{os.pathsep}{home / 'lib'}/*",
        "icebergsync.testinfra.DebeziumToKafka", str(properties)], log, cwd=workdir)
    server.wait_until(lambda: "debezium: task started" in log.read_text(errors="replace"), 120, "the connector's task")
    return server
