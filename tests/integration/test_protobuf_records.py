"""Protobuf records through the real Schema Registry (Apicurio, Confluent API) and Kafka: the table is created from the
registered message (a nested message, repeated fields, a map, an enum, a Timestamp, a wrapper), a second version of
the message adds a field, and Apache Iceberg's Spark runtime reads back what was produced; bytes that are not a
message of their schema are a dead letter."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2, wrappers_pb2
from pyspark.sql import SparkSession

from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import frontier_reached, kafka_source, new_topic
from tests.integration.schema_registry import SchemaRegistry
from tests.integration.sync_support import BackgroundJob, catalog_of, make_sync

F = descriptor_pb2.FieldDescriptorProto
TS = datetime(2024, 3, 1, 10, 0, 0, 123456, tzinfo=UTC)


def order_class(version: int) -> Any:
    """``message Order`` (proto3) with a nested ``Item``, as protoc's generated code builds it; version 2 adds
    ``note``. Each version in a pool of its own (the registry sees two schemas)."""
    file = descriptor_pb2.FileDescriptorProto(name=f"shop/order_v{version}.proto", package="shop", syntax="proto3",
                                              dependency=["google/protobuf/timestamp.proto",
                                                          "google/protobuf/wrappers.proto"])
    state = file.enum_type.add(name="State")
    state.value.add(name="NEW", number=0)
    state.value.add(name="PAID", number=1)
    order = file.message_type.add(name="Order")
    item = order.nested_type.add(name="Item")
    item.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    item.field.add(name="qty", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    entry = order.nested_type.add(name="TagsEntry", options=descriptor_pb2.MessageOptions(map_entry=True))
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    order.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    order.field.add(name="items", number=2, type=F.TYPE_MESSAGE, type_name=".shop.Order.Item", label=F.LABEL_REPEATED)
    order.field.add(name="tags", number=3, type=F.TYPE_MESSAGE, type_name=".shop.Order.TagsEntry",
                    label=F.LABEL_REPEATED)
    order.field.add(name="state", number=4, type=F.TYPE_ENUM, type_name=".shop.State", label=F.LABEL_OPTIONAL)
    order.field.add(name="at", number=5, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp",
                    label=F.LABEL_OPTIONAL)
    order.field.add(name="discount", number=6, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Int64Value",
                    label=F.LABEL_OPTIONAL)
    order.field.add(name="big", number=7, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
    if version == 2:
        order.field.add(name="note", number=8, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    for known in (timestamp_pb2, wrappers_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        known.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def order(cls: Any, n: int, version: int) -> Any:
    message = cls(id=n, items=[cls.Item(sku=f"s{n}-{i}", qty=i) for i in range(n % 3)], tags={"k": n},
                  state=n % 2, big=2**64 - n)
    message.at.FromDatetime(TS)
    if n % 2:
        message.discount.value = n
    if version == 2:
        message.note = f"note {n}"
    return message


def expected(n: int, version: int) -> dict[str, Any]:
    return {"id": n, "items": [{"sku": f"s{n}-{i}", "qty": i} for i in range(n % 3)], "tags": {"k": n},
            "state": "PAID" if n % 2 else "NEW", "at": TS, "discount": n if n % 2 else None, "big": 2**64 - n,
            "note": f"note {n}" if version == 2 else None}


def test_a_protobuf_topic_creates_and_evolves_its_table(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, schema_registry: SchemaRegistry) -> None:
    topic = new_topic(kafka_broker, partitions=1)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "enable.idempotence": True})
    context = SerializationContext(topic, MessageField.VALUE)
    first, second = order_class(1), order_class(2)
    serialize_first = ProtobufSerializer(first, schema_registry.client(), {"use.deprecated.format": False})
    for n in range(1, 31):
        producer.produce(topic, value=serialize_first(order(first, n, 1), context))
    serialize_second = ProtobufSerializer(second, schema_registry.client(), {"use.deprecated.format": False})
    for n in range(31, 61):
        producer.produce(topic, value=serialize_second(order(second, n, 2), context))
    good = serialize_first(order(first, 1, 1), context)
    producer.produce(topic, value=good[:6] + b"\xff\xff\xff")  # the header of a real record, then no message
    assert producer.flush(30) == 0
    ends = kafka_broker.end_offsets(topic)
    sync = make_sync(tmp_path, kafka_source(kafka_broker, topic, format="protobuf", maxRecordsPerTrigger=25,
                                            schemaRegistry={"url": schema_registry.url}),
                     deadLetter={"table": "sales.orders_dlq"})
    catalog = catalog_of(sync)

    caught_up = frontier_reached(catalog, topic, ends)

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(caught_up, "every record committed", timeout=300)
    table = catalog.load_table("sales.orders")
    assert [(f.name, str(f.field_type)) for f in table.schema().fields][-2:] == [("big", "decimal(20, 0)"),
                                                                                 ("note", "string")]
    frame = spark.read.format("iceberg").load(table.metadata_location)
    rows = {}
    for row in frame.collect():
        value = row.asDict(recursive=True)
        value["at"] = value["at"].astimezone(UTC)
        rows[value["id"]] = value
    assert rows == {n: expected(n, 1 if n <= 30 else 2) for n in range(1, 61)}
    reasons = table.catalog.load_table("sales.orders_dlq").scan().to_arrow().column("reason").to_pylist()
    assert len(reasons) == 1 and reasons[0].startswith("bytes are not a datum of schema id "), reasons
