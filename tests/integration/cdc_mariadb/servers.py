"""MariaDB with its binary log in ROW format, and Debezium's MariaDB connector, as servers of the suite.

Both come from the cache ``scripts/infra/services.sh mariadb`` fills (Debian's pinned MariaDB packages,
unpacked and run relocated; Debezium's MariaDB connector from Maven Central on its own engine's classpath)
and run like every other test server (:class:`tests.infra.services.ServerProcess`): on 127.0.0.1, under
``timeout``, killed when pytest dies, stopped at the end. As root the server runs as an ordinary user
(tests/integration/cdc_servers.py); each server bootstraps a fresh data directory.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql

from tests.infra.services import HOST, KafkaBroker, ServerProcess, free_port
from tests.integration.cdc_servers import AS_ORDINARY_USER, server_paths, start_debezium_runner

ROOT = "root"  # the bootstrap's superuser, without a password, reachable from 127.0.0.1 only
# The server's settings Debezium needs (docs/mysql-mariadb.md); the rest keep the tests fast.
BINLOG_SETTINGS = ["--log-bin=binlog", "--server-id=1", "--binlog-format=ROW", "--binlog-row-image=FULL"]


@dataclass
class MariaDB:
    """A running server: ``connect()`` opens a PyMySQL connection (autocommit, utf8mb4)."""

    port: int
    server: ServerProcess

    def connect(self, user: str = ROOT, password: str = "", database: str | None = None) -> pymysql.Connection[Any]:
        return pymysql.connect(host=HOST, port=self.port, user=user, password=password, database=database,
                               charset="utf8mb4", autocommit=True, connect_timeout=5)


def start_mariadb(workdir: Path) -> MariaDB:
    """Bootstrap a fresh datadir under ``workdir`` and start MariaDB on it with the binary log Debezium reads
    (``binlog_format=ROW``, ``binlog_row_image=FULL``, ``server_id``), in UTC, loopback only."""
    paths = server_paths("mariadb")
    usr = Path(paths["MARIADB_ROOT"]) / "usr"
    env = {"LD_LIBRARY_PATH": paths["MARIADB_LIB"], "TZ": "UTC"}
    data = workdir / "data"
    subprocess.run([*AS_ORDINARY_USER, str(usr / "bin" / "mariadb-install-db"), "--no-defaults", f"--basedir={usr}",
                    f"--datadir={data}", "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, capture_output=True, timeout=120, env=env)
    port = free_port()
    server = ServerProcess("mariadb", [
        *AS_ORDINARY_USER, str(usr / "sbin" / "mariadbd"), "--no-defaults", f"--basedir={usr}", f"--datadir={data}",
        f"--bind-address={HOST}", f"--port={port}", f"--socket={workdir / 'mariadb.sock'}",
        f"--pid-file={workdir / 'mariadb.pid'}", *BINLOG_SETTINGS, "--skip-name-resolve", "--default-time-zone=+00:00",
        "--character-set-server=utf8mb4", "--collation-server=utf8mb4_unicode_ci", "--innodb-buffer-pool-size=64M",
        "--innodb-flush-log-at-trx-commit=0", "--sync-binlog=0"], workdir / "mariadb.log", env=env)
    mariadb = MariaDB(port, server)

    def accepts_connections() -> bool:
        mariadb.connect().close()
        return True

    server.wait_until(accepts_connections, 60, "connections")
    return mariadb


def connector_settings(connector_json: Path) -> dict[str, str]:
    """The ``config`` of a Kafka Connect connector document (e.g. examples/mariadb-debezium/debezium-connector.json),
    with its ``name``."""
    document = json.loads(connector_json.read_text())
    return {"name": document["name"], **{key: str(value) for key, value in document["config"].items()}}


def as_embedded_engine(connect: Mapping[str, str]) -> dict[str, str]:
    """Kafka Connect's converter settings as Debezium's embedded engine reads them: its JSON format configures
    ONE JsonConverter from the ``converter.*`` keys, so each ``value.converter.<x>`` is passed as ``converter.<x>``
    (the key's converter is the same class; the runner writes the key with it too)."""
    engine = dict(connect)
    for key, value in connect.items():
        if key.startswith("value.converter.") and key != "value.converter":
            engine["converter." + key.removeprefix("value.converter.")] = value
    return engine


def start_debezium(workdir: Path, mariadb: MariaDB, broker: KafkaBroker, connector: Mapping[str, str],
                   user: str, password: str) -> ServerProcess:
    """Debezium's MariaDB connector with ``connector`` (a Kafka Connect ``config``, taken as it is but for where
    the database, the broker and the offsets are), writing JSON change events to ``broker``."""
    config = {
        **as_embedded_engine(connector),
        "database.hostname": HOST, "database.port": str(mariadb.port), "database.user": user,
        "database.password": password,
        "schema.history.internal.kafka.bootstrap.servers": broker.bootstrap_servers,
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(workdir / "offsets.dat"),
        "offset.flush.interval.ms": "1000",
    }
    return start_debezium_runner(workdir, "mariadb", "debezium-mariadb", broker, config)
