"""JSON Schema records through the real Schema Registry (Apicurio, Confluent API) and Kafka: the table is created from
the registered JSON Schema (nested objects, arrays, maps), a second schema version adds a nested property, the
documents are decoded by the strict JSON rules (a value that does not fit is a dead letter naming its path), and
Apache Iceberg's Spark runtime reads back what was produced."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import frontier_reached, kafka_source, new_topic
from tests.integration.schema_registry import SchemaRegistry
from tests.integration.sync_support import BackgroundJob, catalog_of, make_sync

V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "customer": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        "items": {"type": "array", "items": {"$ref": "#/definitions/Item"}},
        "tags": {"type": "object", "additionalProperties": {"type": "integer"}},
        "day": {"type": "string", "format": "date"},
    },
    "required": ["id"],
    "definitions": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}},
}
V2 = {**V1, "properties": {**V1["properties"], "customer": {
    "type": "object", "properties": {"name": {"type": "string"}, "tier": {"type": ["null", "string"]}},
    "required": ["name"]}}}


def document(n: int, version: int) -> dict[str, Any]:
    customer: dict[str, Any] = {"name": f"c{n}"}
    if version == 2:
        customer["tier"] = "gold" if n % 2 else None
    return {"id": n, "customer": customer, "items": [{"sku": f"s{n}", "qty": n}] * (n % 3),
            "tags": {"k": n}, "day": "2024-02-29"}


def produce(broker: KafkaBroker, registry: SchemaRegistry, topic: str, schema: dict[str, Any],
            records: list[dict[str, Any]]) -> None:
    serializer = JSONSerializer(json.dumps(schema), registry.client())
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True})
    context = SerializationContext(topic, MessageField.VALUE)
    for record in records:
        producer.produce(topic, value=serializer(record, context))
    assert producer.flush(30) == 0


def test_a_json_schema_topic_creates_and_evolves_its_table(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, schema_registry: SchemaRegistry) -> None:
    topic = new_topic(kafka_broker, partitions=1)
    produce(kafka_broker, schema_registry, topic, V1, [document(n, 1) for n in range(1, 41)])
    v1_id = schema_registry.client().get_latest_version(f"{topic}-value").schema_id
    bad = b"\x00" + v1_id.to_bytes(4, "big") + json.dumps({"id": 99, "items": [{"sku": 5}]}).encode()
    produce(kafka_broker, schema_registry, topic, V2, [document(n, 2) for n in range(41, 81)])
    sync = make_sync(tmp_path, kafka_source(kafka_broker, topic, format="jsonschema", maxRecordsPerTrigger=30,
                                            schemaRegistry={"url": schema_registry.url}),
                     deadLetter={"table": "sales.orders_dlq"})
    sender = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    sender.produce(topic, value=bad)
    assert sender.flush(30) == 0
    ends = kafka_broker.end_offsets(topic)
    catalog = catalog_of(sync)

    caught_up = frontier_reached(catalog, topic, ends)

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(caught_up, "every record committed", timeout=300)
    table = catalog.load_table("sales.orders")
    customer = table.schema().find_field("customer").field_type
    assert [(f.name, str(f.field_type), f.required) for f in customer.fields] == [
        ("name", "string", True), ("tier", "string", False)]
    frame = spark.read.format("iceberg").load(table.metadata_location)
    rows = {row["id"]: row.asDict(recursive=True) for row in frame.collect()}
    expected = {}
    for n in range(1, 81):
        produced = document(n, 1 if n <= 40 else 2)
        expected[n] = {**produced, "customer": {"tier": None, **produced["customer"]},
                       "day": date(2024, 2, 29)}
    assert rows == expected
    reasons = table.catalog.load_table("sales.orders_dlq").scan().to_arrow().column("reason").to_pylist()
    assert reasons == ["field items[0].sku: value 5 is a number, not a string"]
