"""Fixtures for tests that run real Spark."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_app.session import build_session
from tests.infra.services import spark_classpath


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session (2 cores) shared by the in-process job tests.

    Its classpath holds Spark's own Iceberg runtime (the independent reader) and the Kafka
    connector, both from Maven Central (scripts/infra/services.sh).
    """
    classpath = spark_classpath("iceberg-spark", "kafka-connector")
    session = build_session("icebergsync-tests", "local[2]",
                            {"spark.driver.extraClassPath": classpath, "spark.executor.extraClassPath": classpath})
    yield session
    session.stop()
