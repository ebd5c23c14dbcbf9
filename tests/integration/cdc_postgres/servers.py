"""PostgreSQL with logical decoding and Debezium's embedded engine, as servers of the suite.

Both come from the cache ``scripts/infra/services.sh postgres debezium`` fills (Debian's pinned
PostgreSQL packages, unpacked; Debezium from Maven Central) and run like every other test server
(:class:`tests.infra.services.ServerProcess`): on 127.0.0.1, under ``timeout``, killed when pytest
dies, stopped at the end.

PostgreSQL refuses to run as root; as root the server runs in a user namespace that maps the
caller to an ordinary uid, so it can read the cache under ``$HOME`` and owns its data directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator, Mapping
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

    def connect(self, dbname: str = DATABASE) -> Connection:
        return psycopg2.connect(host=HOST, port=self.port, user=USER, dbname=dbname, connect_timeout=5)

    def create_database(self, name: str) -> Connection:
        """``CREATE DATABASE name``; a connection to it."""
        connection = self.connect()
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE {name}")
        finally:
            connection.close()
        return self.connect(name)


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


@contextlib.contextmanager
def running_postgres(workdir: Path) -> Iterator[Postgres]:
    """:func:`start_postgres`, stopped on leaving."""
    server = start_postgres(workdir)
    try:
        yield server
    finally:
        server.server.stop()


def start_debezium(workdir: Path, postgres: Postgres, broker: KafkaBroker, prefix: str, tables: list[str],
                   settings: Mapping[str, str]) -> ServerProcess:
    """Debezium's PostgreSQL connector (pgoutput) on ``public.<table>`` for each of ``tables``, writing JSON
    change events to ``<prefix>.public.<table>`` on ``broker`` (topics the caller created); ``settings``
    add to or override the connector's and the converter's (``converter.schemas.enable``, ...)."""
    return run_debezium(workdir, broker, {
        "name": prefix,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        **_engine_settings(workdir, postgres, DATABASE),
        "topic.prefix": prefix, "plugin.name": "pgoutput", "slot.name": prefix.replace("-", "_"),
        "publication.name": f"{prefix.replace('-', '_')}_publication", "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(f"public.{table}" for table in tables),
        **settings,
    })


EXAMPLE_CONNECTOR = REPO_ROOT / "examples" / "postgres-debezium" / "debezium-connector.json"
_JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"


@dataclass(frozen=True)
class ExampleConnector:
    """The example's connector (examples/postgres-debezium/debezium-connector.json) as the embedded engine takes it:
    ``config`` the engine's settings, ``partitions`` the partitions of each topic (the Connect worker's topic creation,
    which the caller does, as an admin would)."""

    config: dict[str, str]
    partitions: int


def example_connector(workdir: Path, postgres: Postgres, database: str, prefix: str, tables: list[str],
                      modes: Mapping[str, str]) -> ExampleConnector:
    """The example's connector settings, overriding only what a test must: the connection (this server and
    ``database``, the slot: one per connector of the server), the offsets (a file: the engine has no Connect worker),
    ``table.include.list`` (``public.<table>`` for each of ``tables``), ``topic.prefix``, and ``modes`` (the settings
    under test). Kafka Connect's converter settings become the engine's: one JsonConverter for keys and values."""
    example = json.loads(EXAMPLE_CONNECTOR.read_text())
    config = {"name": example["name"], **example["config"]}
    for side in ("key", "value"):
        assert config.pop(f"{side}.converter") == _JSON_CONVERTER, f"{side}.converter is not Kafka's JsonConverter"
    schemas = {config.pop("key.converter.schemas.enable"), config.pop("value.converter.schemas.enable")}
    assert len(schemas) == 1, "the engine's converter takes one schemas.enable for keys and values"
    partitions = int(config.pop("topic.creation.default.partitions"))
    config.pop("topic.creation.default.replication.factor")  # one broker: replication 1
    config.update({
        **_engine_settings(workdir, postgres, database),
        "database.user": config["database.user"],  # the example's role (examples/postgres-debezium/postgres-setup.sql)
        "slot.name": f"{config['slot.name']}_{database}",
        "topic.prefix": prefix,
        "table.include.list": ",".join(f"public.{table}" for table in tables),
        "converter.schemas.enable": schemas.pop(),
        **modes,
    })
    return ExampleConnector(config, partitions)


def _engine_settings(workdir: Path, postgres: Postgres, database: str) -> dict[str, str]:
    """The connection (trust authentication: the password is not checked) and the engine's offsets file."""
    return {
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(workdir / "offsets.dat"),
        "offset.flush.interval.ms": "1000",
        "database.hostname": HOST, "database.port": str(postgres.port), "database.user": USER,
        "database.password": "unused", "database.dbname": database,
    }


def run_debezium(workdir: Path, broker: KafkaBroker, config: Mapping[str, str]) -> ServerProcess:
    """Debezium's embedded engine with ``config`` (the engine's and the connector's settings), writing to ``broker``;
    returns once the connector's task runs."""
    ensure_services("debezium")
    home = cache_dir() / "debezium"
    properties = workdir / "debezium.properties"
    properties.write_text("".join(f"{key}={value}\n" for key, value in
                                  {**config, "kafka.bootstrap.servers": broker.bootstrap_servers}.items()))
    log = workdir / "debezium.log"
    server = ServerProcess("debezium", [
        JAVA, *SMALL_JVM, "-Xmx384m", "-cp", f"{home / 'classes'}{os.pathsep}{home / 'lib'}/*",
        "icebergsync.testinfra.DebeziumToKafka", str(properties)], log, cwd=workdir)
    server.wait_until(lambda: "debezium: task started" in log.read_text(errors="replace"), 120, "the connector's task")
    return server


def wait_streaming(debezium: ServerProcess, timeout: float = 120) -> None:
    """Until the connector's initial snapshot has ended and it streams changes. (A table rewrite, such as ``ALTER
    COLUMN … TYPE bigint``, is not MVCC-safe: a snapshot that reads a table after a concurrent rewrite finds it
    empty, and its rows are never sent.)"""
    debezium.wait_until(lambda: "Starting streaming" in debezium.log_path.read_text(errors="replace"), timeout,
                        "the end of the connector's snapshot")
