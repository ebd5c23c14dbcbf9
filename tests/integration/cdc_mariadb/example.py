"""examples/mariadb-debezium/ as the MariaDB tests run it: its setup SQL and its IcebergSync, on the test's servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.infra.services import KafkaBroker
from tests.integration.cdc_mariadb.servers import MariaDB
from tests.integration.sync_support import REPO

EXAMPLE = REPO / "examples" / "mariadb-debezium"
PASSWORD = "debezium-secret"  # replaces the example's REPLACE_ME


def run_setup_sql(mariadb: MariaDB) -> None:
    """The example's ``mariadb-setup.sql`` as an administrator, its password replaced."""
    connection = mariadb.connect()
    try:
        with connection.cursor() as cursor:
            for statement in (EXAMPLE / "mariadb-setup.sql").read_text().split(";"):
                sql = "\n".join(line for line in statement.splitlines() if not line.lstrip().startswith("--")).strip()
                if sql:
                    cursor.execute(sql.replace("REPLACE_ME", PASSWORD))
    finally:
        connection.close()


def example_sync(directory: Path, broker: KafkaBroker) -> dict[str, Any]:
    """The example's IcebergSync on this broker and a SQLite catalog under ``directory``, committing every second."""
    documents = [d for d in yaml.safe_load_all((EXAMPLE / "icebergsync.yaml").read_text()) if d]
    (document,) = [d for d in documents if d["kind"] == "IcebergSync"]
    document["metadata"]["namespace"] = "test"
    kafka = document["spec"]["source"]["kafka"]
    kafka["bootstrapServers"] = broker.bootstrap_servers
    del kafka["secretRef"]
    table = document["spec"]["table"]
    del table["catalogRef"]
    table["catalog"] = {"type": "sql", "uri": f"sqlite:///{directory}/catalog.db", "warehouse": str(directory / "warehouse")}
    document["spec"]["commit"] = {"interval": "1s", "pollInterval": "200ms"}
    return document
