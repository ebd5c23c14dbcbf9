"""PostgreSQL with logical decoding and Debezium's embedded engine, as servers of the suite.

Both come from the cache ``scripts/infra/services.sh postgres debezium`` fills (Debian's pinned
PostgreSQL packages, unpacked; Debezium from Maven Central) and run like every other test server
(:class:`tests.infra.services.ServerProcess`): on 127.0.0.1, under ``timeout``, killed when pytest
dies, stopped at the end.

PostgreSQL refuses to run as root: as root it runs as an ordinary user (``AS_ORDINARY_USER``,
tests/integration/cdc_servers.py, which also runs Debezium).
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

from tests.infra.services import HOST, REPO_ROOT, KafkaBroker, ServerProcess, free_port
from tests.integration.cdc_servers import AS_ORDINARY_USER, server_paths, start_debezium_runner

USER = "icebergsync"
DATABASE = "postgres"


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
    under test). Kafka Connect's converter settings (``key.converter.*``, ``value.converter.*``) become the engine's
    (``converter.*``): one JsonConverter for keys and values."""
    example = json.loads(EXAMPLE_CONNECTOR.read_text())
    config = {"name": example["name"], **example["config"]}
    for side in ("key", "value"):
        assert config.pop(f"{side}.converter") == _JSON_CONVERTER, f"{side}.converter is not Kafka's JsonConverter"
    for name in [name for name in config if name.startswith(("key.converter.", "value.converter."))]:
        setting = name.split(".converter.", 1)[1]
        value = config.pop(name)
        assert config.setdefault(f"converter.{setting}", value) == value, (
            f"the engine's converter takes one {setting} for keys and values")
    partitions = int(config.pop("topic.creation.default.partitions"))
    config.pop("topic.creation.default.replication.factor")  # one broker: replication 1
    config.update({
        **_engine_settings(workdir, postgres, database),
        "database.user": config["database.user"],  # the example's role (examples/postgres-debezium/postgres-setup.sql)
        "slot.name": f"{config['slot.name']}_{database}",
        "topic.prefix": prefix,
        "table.include.list": ",".join(f"public.{table}" for table in tables),
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
    """Debezium's embedded engine with the PostgreSQL connector and ``config`` (the engine's and the connector's
    settings), writing to ``broker``; returns once the connector's task runs. With transaction metadata on, the
    ``<topic.prefix>.transaction`` topic must exist (Kafka Connect's topic creation makes it for users): without it
    the engine's producer blocks ``max.block.ms`` (60 s) on every BEGIN and END it sends."""
    if config.get("provide.transaction.metadata") == "true":
        transactions = f"{config['topic.prefix']}.transaction"
        assert transactions in broker.list_topics(), f"create {transactions} before Debezium writes to it"
    return start_debezium_runner(workdir, "debezium", "debezium", broker, config)


def wait_streaming(debezium: ServerProcess, timeout: float = 120) -> None:
    """Until the connector's initial snapshot has ended and it streams changes. (A table rewrite, such as ``ALTER
    COLUMN … TYPE bigint``, is not MVCC-safe: a snapshot that reads a table after a concurrent rewrite finds it
    empty, and its rows are never sent.)"""
    debezium.wait_until(lambda: "Starting streaming" in debezium.log_path.read_text(errors="replace"), timeout,
                        "the end of the connector's snapshot")
