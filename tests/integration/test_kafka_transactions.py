"""Transactional Kafka producers on a real broker: only committed records land, each once, and the
frontier is exact across transaction markers and aborted records (offset gaps)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from icebergsync.spec import parse_spec
from spark_app.job import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import kafka_document, last_frontier, new_topic, order
from tests.integration.sync_support import BackgroundJob, catalog_of, table_ids


class TransactionalProducer:
    """kafka-clients' KafkaProducer with a transactional.id, in the test's Spark JVM (the connector brings it)."""

    def __init__(self, spark: SparkSession, broker: KafkaBroker):
        self._jvm: Any = spark.sparkContext._jvm
        properties = self._jvm.java.util.Properties()
        serializer = "org.apache.kafka.common.serialization.StringSerializer"
        for key, value in {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"tx-{uuid.uuid4().hex}",
                           "key.serializer": serializer, "value.serializer": serializer}.items():
            properties.setProperty(key, value)
        self._producer = self._jvm.org.apache.kafka.clients.producer.KafkaProducer(properties)
        self._producer.initTransactions()

    def send(self, topic: str, ids: range) -> None:
        """Begin a transaction and send one order per id to partition 0 (left open)."""
        self._producer.beginTransaction()
        for i in ids:
            record = self._jvm.org.apache.kafka.clients.producer.ProducerRecord(topic, 0, f"k{i}", order(i))
            self._producer.send(record)
        self._producer.flush()

    def commit(self) -> None:
        self._producer.commitTransaction()

    def abort(self) -> None:
        self._producer.abortTransaction()

    def close(self) -> None:
        self._producer.close()


def test_only_committed_transactions_land_once_and_an_open_one_holds_the_frontier(
    tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker
) -> None:
    topic = new_topic(kafka_broker, 1)
    producer = TransactionalProducer(spark, kafka_broker)
    try:
        producer.send(topic, range(0, 5))        # offsets 0-4, commit marker 5
        producer.commit()
        producer.send(topic, range(100, 105))    # offsets 6-10, abort marker 11
        producer.abort()
        producer.send(topic, range(5, 10))       # offsets 12-16, commit marker 17
        producer.commit()
        producer.send(topic, range(10, 15))      # offsets 18-22: open
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
    finally:
        producer.close()
