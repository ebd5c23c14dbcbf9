"""Transactional Kafka producers on a real broker: only committed records land, each once, and the
frontier is exact across transaction markers and aborted records (offset gaps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from icebergsync.spec import parse_spec
from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import (
    kafka_document,
    last_frontier,
    new_topic,
    transactions_ending_in_an_open_one,
)
from tests.integration.sync_support import BackgroundJob, catalog_of, table_ids


def test_only_committed_transactions_land_once_and_an_open_one_holds_the_frontier(
    tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker
) -> None:
    topic = new_topic(kafka_broker, 1)
    producer = transactions_ending_in_an_open_one(kafka_broker, topic)
    sync = parse_spec(kafka_document(tmp_path, kafka_broker, topic))
    catalog = catalog_of(sync)

    def table() -> Any:
        return catalog.load_table("sales.orders")

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: last_frontier(table()) == {topic: {"0": 18}}, "the frontier at the open transaction")
        assert table_ids(table()) == list(range(10))
        producer.commit()                    # commit marker 23
        running.wait_until(lambda: last_frontier(table()) == {topic: {"0": 24}}, "the frontier past the commit")
    assert table_ids(table()) == list(range(15))
