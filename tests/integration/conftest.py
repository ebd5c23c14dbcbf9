"""Fixtures for tests that run real Spark."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_app.session import build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session (2 cores) shared by the in-process job tests."""
    session = build_session("icebergsync-tests", "local[2]")
    yield session
    session.stop()
