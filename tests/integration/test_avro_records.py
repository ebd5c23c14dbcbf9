"""Avro records through the real Schema Registry (Apicurio, Confluent API) and Kafka: a topic whose schema evolves twice
mid-stream syncs exactly once through a kill -9 into a table created from the registry's schema, read back by
Apache Iceberg's Spark runtime equal to what was produced (nested values included); an unknown schema id, corrupt
bytes and records outside the wire format are dead letters with their reason; a registry outage is ridden out
past its budget stops the sync with exit 8 and its cause, never a dead-lettered stream (riding one out within the
budget: tests/unit/test_registry_client.py)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from icebergsync.errors import EXIT_SCHEMA_REGISTRY_UNREACHABLE
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import frontier_reached, kafka_source, new_topic
from tests.integration.schema_registry import SchemaRegistry
from tests.integration.sync_support import (
    catalog_of,
    kill_after_first_commit,
    make_sync,
    run_job_process,
    sink_commits,
    sync_document,
    write_spec,
)

ITEM = {"type": "record", "name": "Item", "fields": [
    {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}
V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
        {"name": "name", "type": "string"}, {"name": "tier", "type": ["null", "string"], "default": None}]}},
    {"name": "items", "type": {"type": "array", "items": ITEM}},
    {"name": "tags", "type": {"type": "map", "values": "long"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
    {"name": "opened", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID"]}},
]}
# v2 adds an optional top-level field; v3 also adds a field inside the nested customer record.
V2 = {**V1, "fields": [*V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
V3 = {**V2, "fields": [V2["fields"][0], {"name": "customer", "type": {
    "type": "record", "name": "Customer", "fields": [
        *V1["fields"][1]["type"]["fields"], {"name": "vip", "type": ["null", "boolean"], "default": None}]}},
    *V2["fields"][2:]]}
TS = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)


def order(n: int, version: int) -> dict[str, Any]:
    customer: dict[str, Any] = {"name": f"c{n}", "tier": "gold" if n % 3 == 0 else None}
    if version >= 3:
        customer["vip"] = n % 2 == 0
    record = {"id": n, "customer": customer, "items": [{"sku": f"s{n}-{i}", "qty": i} for i in range(n % 3)],
              "tags": {f"k{i}": n * i for i in range(n % 2 + 1)}, "amount": Decimal(n) / 4,
              "at": TS.replace(minute=n % 60), "day": date(2024, 2, 29) if n % 2 else None,
              "opened": time(9, 30, n % 60), "ref": f"00000000-0000-0000-0000-{n:012d}", "state": "PAID"}
    if version >= 2:
        record["note"] = f"note {n}"
    return record


def expected(n: int, version: int) -> dict[str, Any]:
    """What Spark reads back for ``order(n, version)`` in the table evolved to v3."""
    produced = order(n, version)
    return {**produced, "customer": {"vip": None, **produced["customer"]},
            "opened": (9 * 3600 + 30 * 60 + n % 60) * 1000, "note": produced.get("note")}


def produce(broker: KafkaBroker, registry: SchemaRegistry, topic: str, schema: dict[str, Any],
            records: list[dict[str, Any]], extra: list[bytes] = ()) -> None:
    serializer = AvroSerializer(registry.client(), json.dumps(schema))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True})
    context = SerializationContext(topic, MessageField.VALUE)
    for record in records:
        producer.produce(topic, value=serializer(record, context))
    for value in extra:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def avro_source(broker: KafkaBroker, registry: SchemaRegistry, topic: str, **registry_settings: Any) -> dict[str, Any]:
    return kafka_source(broker, topic, format="avro", maxRecordsPerTrigger=40,
                        schemaRegistry={"url": registry.url, **registry_settings})


def test_an_avro_topic_evolving_twice_syncs_exactly_once_through_a_kill(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, schema_registry: SchemaRegistry) -> None:
    topic = new_topic(kafka_broker, partitions=1)
    corrupt = b"\x00" + (10**6).to_bytes(4, "big") + b"\x02"  # a schema id the registry does not know
    produce(kafka_broker, schema_registry, topic, V1, [order(n, 1) for n in range(1, 121)],
            [b"not avro", corrupt])
    document = sync_document(tmp_path, avro_source(kafka_broker, schema_registry, topic),
                             deadLetter={"table": "sales.orders_dlq"})
    spec_path = write_spec(tmp_path, document)
    catalog = catalog_of(make_sync(tmp_path, avro_source(kafka_broker, schema_registry, topic)))

    def committed() -> bool:
        return any(c.kind == "data" for c in sink_commits(catalog.load_table("sales.orders"), "test/orders"))

    kill_after_first_commit(spec_path, committed)
    produce(kafka_broker, schema_registry, topic, V2, [order(n, 2) for n in range(121, 200)])
    v1_id = schema_registry.client().get_version(f"{topic}-value", 1).schema_id
    produce(kafka_broker, schema_registry, topic, V3, [order(n, 3) for n in range(200, 260)],
            [b"\x00" + v1_id.to_bytes(4, "big") + b"\xff\xff\xff"])  # a known id, bytes no datum of it
    ends = kafka_broker.end_offsets(topic)

    caught_up = frontier_reached(catalog, topic, ends)

    status, output = run_job_process(spec_path, 2, stop_when=caught_up, timeout=300)
    assert status == 0, output[-3000:]
    table = catalog.load_table("sales.orders")
    customer = table.schema().find_field("customer").field_type
    assert [f.name for f in customer.fields] == ["name", "tier", "vip"]
    assert table.schema().find_field("note").required is False
    frame = spark.read.format("iceberg").load(table.metadata_location)
    rows = {row["id"]: row.asDict(recursive=True) for row in frame.collect()}
    for row in rows.values():
        row["at"] = row["at"].astimezone(UTC)
    wanted = {n: expected(n, 1 if n < 121 else 2 if n < 200 else 3) for n in range(1, 260)}
    assert rows.keys() == wanted.keys()
    assert rows == wanted
    reasons = sorted(table.catalog.load_table("sales.orders_dlq").scan().to_arrow().column("reason").to_pylist())
    assert reasons[0].startswith("bytes are not a datum of schema id ")
    assert reasons[1:] == ["not in the Confluent wire format (magic byte 0, then a 4-byte schema id)",
                           "schema id 1000000 is not in the schema registry"]


def test_a_registry_outage_past_its_budget_stops_the_sync_with_its_cause(
        tmp_path: Path, kafka_broker: KafkaBroker, schema_registry: SchemaRegistry) -> None:
    topic = new_topic(kafka_broker, partitions=1)
    produce(kafka_broker, schema_registry, topic, V1, [order(n, 1) for n in range(1, 11)])
    document = sync_document(tmp_path, avro_source(kafka_broker, schema_registry, topic, retryBudget="5s"),
                             deadLetter={"table": "sales.orders_dlq"})
    spec_path = write_spec(tmp_path, document)
    with schema_registry.outage():
        status, output = run_job_process(spec_path, 1, timeout=240)
    assert status == EXIT_SCHEMA_REGISTRY_UNREACHABLE, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert f"schema registry {schema_registry.url}" in last and "could not be fetched" in last, last
    catalog = catalog_of(make_sync(tmp_path, avro_source(kafka_broker, schema_registry, topic)))
    assert not catalog.table_exists("sales.orders_dlq") or \
        catalog.load_table("sales.orders_dlq").scan().to_arrow().num_rows == 0  # never a dead-lettered stream
