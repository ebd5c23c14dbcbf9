"""The real test servers work: Kafka (KRaft), Iceberg REST catalog (local and on MinIO), MinIO, and a
local Spark session reading a REST+S3 Iceberg table through Iceberg's own Spark runtime."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

from tests.infra.services import KafkaBroker, RestCatalog, S3Server


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_kafka_topic_produce_consume_and_delete_records(kafka_broker: KafkaBroker) -> None:
    topic = _unique("events")
    kafka_broker.create_topic(topic, partitions=3)
    assert topic in kafka_broker.list_topics()
    assert kafka_broker.end_offsets(topic) == {0: 0, 1: 0, 2: 0}

    records = [(f"k{i}", f"v{i}", i % 3) for i in range(30)]
    records += [(None, b"\x00\xffbinary", 1), ("no-partition", "x", None)]
    placed = kafka_broker.produce(topic, records)
    assert [p for p, _ in placed[:30]] == [i % 3 for i in range(30)]

    ends = kafka_broker.end_offsets(topic)
    assert sum(ends.values()) == 32
    assert ends[0] >= 10 and ends[1] >= 11 and ends[2] >= 10

    got = kafka_broker.consume(topic)
    assert len(got) == 32
    by_value = {r.value: r for r in got}
    assert by_value[b"v4"].key == b"k4" and by_value[b"v4"].partition == 1
    assert by_value[b"\x00\xffbinary"].key is None

    # retention: records below offset 5 of partition 0 disappear; end offsets do not move
    assert kafka_broker.delete_records(topic, 0, 5) == 5
    assert kafka_broker.begin_offsets(topic)[0] == 5
    assert kafka_broker.end_offsets(topic) == ends
    assert len(kafka_broker.consume(topic)) == 27

    kafka_broker.delete_topic(topic)


def test_auto_topic_creation_is_disabled(kafka_broker: KafkaBroker) -> None:
    with pytest.raises(RuntimeError):
        kafka_broker.end_offsets(_unique("missing"))


def _sample_table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([1, 2, 3], type=pa.int64()),
            "name": pa.array(["a", "b", "c"], type=pa.string()),
        }
    )


def _create_and_append(cat: RestCatalog, namespace: str) -> str:
    catalog = cat.load()
    catalog.create_namespace(namespace)
    data = _sample_table()
    table = catalog.create_table(f"{namespace}.t", schema=data.schema)
    table.append(data)
    table.append(data.slice(0, 1))
    return table.metadata_location


def _read_back(cat: RestCatalog, namespace: str) -> pa.Table:
    # a fresh client, so the data really comes from the server + storage
    return cat.load("fresh").load_table(f"{namespace}.t").scan().to_arrow().sort_by("id")


def test_rest_catalog_local_warehouse(rest_catalog: RestCatalog) -> None:
    ns = _unique("ns")
    location = _create_and_append(rest_catalog, ns)
    assert location.startswith("file:") or location.startswith("/")
    got = _read_back(rest_catalog, ns)
    assert got.column("id").to_pylist() == [1, 1, 2, 3]
    assert (ns,) in rest_catalog.load().list_namespaces()


def test_s3_server_roundtrip(s3_server: S3Server) -> None:
    fs = s3_server.filesystem()
    path = f"{s3_server.bucket}/smoke/{uuid.uuid4().hex}.txt"
    with fs.open_output_stream(path) as f:
        f.write(b"hello")
    with fs.open_input_stream(path) as f:
        assert f.read() == b"hello"
    assert s3_server.fileio_properties["s3.endpoint"] == s3_server.endpoint


def test_rest_catalog_on_s3(rest_catalog_s3: RestCatalog, s3_server: S3Server) -> None:
    ns = _unique("ns")
    location = _create_and_append(rest_catalog_s3, ns)
    assert location.startswith(f"s3://{s3_server.bucket}/warehouse/")
    got = _read_back(rest_catalog_s3, ns)
    assert got.column("name").to_pylist() == ["a", "a", "b", "c"]
    # the metadata really is in MinIO
    key = location.removeprefix("s3://")
    assert s3_server.filesystem().get_file_info(key).size > 0


@pytest.mark.slow
def test_spark_reads_rest_s3_table(spark: Any, rest_catalog_s3: RestCatalog) -> None:
    """Iceberg's Spark runtime (the tests' independent reader) reads a table pyiceberg wrote, through
    the REST catalog and S3FileIO on MinIO.

    It configures the suite's shared session at runtime (a catalog is read on first use) rather than
    building its own: PySpark has one JVM per process.
    """
    ns = _unique("ns")
    _create_and_append(rest_catalog_s3, ns)
    for key, value in rest_catalog_s3.spark_catalog_conf("lake").items():
        spark.conf.set(key, value)
    rows = spark.sql(f"SELECT id, name FROM lake.{ns}.t ORDER BY id, name").collect()
    assert [(r.id, r.name) for r in rows] == [(1, "a"), (1, "a"), (2, "b"), (3, "c")]
    assert spark.sql(f"SELECT count(*) AS n FROM lake.{ns}.t.snapshots").first().n == 2
