"""Fixtures for tests that run real Spark, and the servers only the integration tier starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_app.job.session import build_session
from tests.infra.services import spark_classpath
from tests.integration.cdc_mariadb.servers import MariaDB, start_mariadb
from tests.integration.cdc_postgres.servers import Postgres, running_postgres
from tests.integration.schema_registry import SchemaRegistry, start_schema_registry


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """THE local Spark session (2 cores) of the test process: PySpark keeps one JVM per process, so
    every in-process test uses this one and none may stop it or build another.

    Its classpath holds Spark's own Iceberg runtime, the independent reader, from Maven Central
    (scripts/infra/services.sh); nothing else: the job needs no connector jar, as in the image.
    """
    classpath = spark_classpath("iceberg-spark")
    session = build_session("icebergsync-tests", "local[2]",
                            {"spark.driver.extraClassPath": classpath, "spark.executor.extraClassPath": classpath})
    yield session
    session.stop()


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[Postgres]:
    """A PostgreSQL server of the test's own (the source database of the Debezium tests), stopped after it."""
    (tmp_path / "postgres").mkdir()
    with running_postgres(tmp_path / "postgres") as server:
        yield server


@pytest.fixture
def mariadb(tmp_path: Path) -> Iterator[MariaDB]:
    """A MariaDB server of the test's own (binary log in ROW format, a fresh datadir), stopped after it."""
    (tmp_path / "mariadb").mkdir()
    server = start_mariadb(tmp_path / "mariadb")
    try:
        yield server
    finally:
        server.server.stop()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistry]:
    """Apicurio Registry (tests/integration/schema_registry.py): its Confluent-compatible API at ``url``,
    ``client()``, and ``outage()``, which stops it for a ``with`` block and starts it again, its schemas kept."""
    registry = start_schema_registry(tmp_path_factory.mktemp("schema-registry"))
    try:
        yield registry
    finally:
        registry.stop()
