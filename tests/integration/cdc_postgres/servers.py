"""PostgreSQL with logical decoding and Debezium's embedded engine, as servers of the suite.

Both come from the cache ``scripts/infra/services.sh postgres debezium`` fills (Debian's pinned
PostgreSQL packages, unpacked; Debezium from Maven Central) and run like every other test server
(:class:`tests.infra.services.ServerProcess`): on 127.0.0.1, under ``timeout``, killed when pytest
dies, stopped at the end.

PostgreSQL refuses to run as root: as root it runs as an ordinary user (``AS_ORDINARY_USER``,
tests/integration/cdc_servers.py, which also runs Debezium).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg2
from psycopg2.extensions import connection as Connection

from tests.infra.services import HOST, KafkaBroker, ServerProcess, free_port
from tests.integration.cdc_servers import AS_ORDINARY_USER, server_paths, start_debezium_runner

USER = "icebergsync"
DATABASE = "postgres"


@dataclass
class Postgres:
    """A running server: ``connect()`` opens a psycopg2 connection to its database as a superuser."""

    port: int
    server: ServerProcess

    def connect(self) -> Connection:
        return psycopg2.connect(host=HOST, port=self.port, user=USER, dbname=DATABASE, connect_timeout=5)


def start_postgres(workdir: Path) -> Postgres:
    """initdb a fresh cluster under ``workdir`` and start it with ``wal_level=logical`` (trust auth, loopback only)."""
    paths = server_paths("postgres")
    binary = Path(paths["POSTGRES_BIN"])
    env = {"LD_LIBRARY_PATH": paths["POSTGRES_LIB"], "TZ": "UTC"}
    data = workdir / "data"
    subprocess.run([*AS_ORDINARY_USER, str(binary / "initdb"), "-D", str(data), "-U", USER, "--auth=trust",
                    "-E", "UTF8", "--locale=C.UTF-8"],
                   check=True, capture_output=True, timeout=120, env={**os.environ, **env})
    port = free_port()
    server = ServerProcess("postgres", [
        *AS_ORDINARY_USER, str(binary / "postgres"), "-D", str(data), "-h", HOST, "-p", str(port),
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
        **settings,
    }
    return start_debezium_runner(workdir, "debezium", "debezium", broker, config)
