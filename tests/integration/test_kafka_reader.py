"""The Kafka source's client (confluent-kafka) on a real KRaft broker: exact offset ranges, transactions,
compacted topics, ranges ending on gaps, missing records, TLS and SASL (PLAIN, SCRAM-SHA-256/512),
and bad credentials failing with a clear error instead of hanging.

The raw range reader (:func:`spark_app.sources.kafka_client.read_range`) is what each Spark task runs for a
work unit; decoding is separate (spark_app.decoding.arrow_decode) and not exercised here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from pyspark.sql import SparkSession

from icebergsync.errors import IcebergSyncError
from icebergsync.protocol import SOURCE_NOTES
from icebergsync.spec import parse_spec
from spark_app.job.loop import SyncJob
from spark_app.sources.kafka import KafkaSource
from spark_app.sources.kafka_client import (
    ClientSettings,
    KafkaAccessError,
    OffsetLookup,
    RangeCounts,
    read_range,
)
from spark_app.sources.units import KafkaUnit
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import (
    LISTENERS,
    TransactionalProducer,
    client_for,
    data_summaries,
    kafka_document,
    last_frontier,
    listener_config,
    new_topic,
    order,
    produce_orders,
    transactions_ending_in_an_open_one,
)
from tests.integration.sync_support import BackgroundJob, catalog_of, table_ids

Record = tuple[int, bytes | None, bytes | None]


def _read(client: ClientSettings, topic: str, partition: int, start: int, end: int,
          **kwargs: int) -> tuple[list[Record], RangeCounts, list[int]]:
    """(records, counts, batch sizes) of one range."""
    counts = RangeCounts()
    records: list[Record] = []
    sizes = []
    for batch in read_range(client, topic, partition, start, end, counts, **kwargs):
        columns = batch.to_pydict()
        records.extend(zip(columns["offset"], columns["key"], columns["value"], strict=True))
        sizes.append(batch.num_rows)
    return records, counts, sizes


def _ids(records: list[Record]) -> list[int]:
    return [json.loads(value)["id"] for _, _, value in records if value is not None]


def _offsets(records: list[Record]) -> list[int]:
    return [offset for offset, _, _ in records]


class RecordingConsumer(confluent_kafka.Consumer):
    """The range reader's consumer, recording its settings and each ``consume`` call: (records asked for, the
    offsets it returned, -1 standing for the partition's end event)."""

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.config = dict(config)
        self.calls: list[tuple[int, list[int]]] = []

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        messages = super().consume(num_messages=num_messages, timeout=timeout)
        self.calls.append((num_messages, [-1 if m.error() else m.offset() for m in messages]))
        return messages


@pytest.fixture
def consumers(monkeypatch: pytest.MonkeyPatch) -> list[RecordingConsumer]:
    """Every consumer :func:`read_range` opens in the test, recording."""
    opened: list[RecordingConsumer] = []

    def open_consumer(config: dict[str, Any]) -> RecordingConsumer:
        opened.append(RecordingConsumer(config))
        return opened[-1]

    monkeypatch.setattr(confluent_kafka, "Consumer", open_consumer)
    return opened


def test_a_range_ending_at_its_partitions_end_asks_for_exactly_its_records(
        kafka_broker: KafkaBroker, consumers: list[RecordingConsumer]) -> None:
    """A range ending at its partition's end is read without waiting for anything past it: each ``consume``
    asks for no more records than the range still holds, so the call bringing its last record ends the read
    (no record past the range exists to fill a larger ask, nor is the end-of-partition event awaited), and a
    fetch the broker cannot fill is held at most 20 ms (fetch.wait.max.ms, librdkafka's default 500 ms).
    Before, the last call of every such range asked for one record more and waited out its 0.5 s poll."""
    topic = new_topic(kafka_broker, 1)
    produce_orders(kafka_broker, topic, range(50), partition=0)
    records, _, _ = _read(client_for(kafka_broker), topic, 0, 20, 50, batch_records=8)
    assert _offsets(records) == list(range(20, 50))
    [consumer] = consumers
    left = 30
    for asked, got in consumer.calls:
        assert 0 < asked <= left and all(20 <= offset < 50 for offset in got), consumer.calls
        left -= len(got)
    assert left == 0 and consumer.calls[-1][1][-1] == 49, consumer.calls  # no call after the last record
    assert int(consumer.config.get("fetch.wait.max.ms", 500)) <= 20  # librdkafka holds a fetch 500 ms by default


def test_a_range_reads_exactly_its_records_and_offsets_come_from_the_same_client(kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 2)
    produce_orders(kafka_broker, topic, range(60), partition=0)
    produce_orders(kafka_broker, topic, range(60, 70), partition=1)
    client = client_for(kafka_broker)

    lookup = OffsetLookup(client)
    assert lookup.partitions([topic, f"{topic}-missing"]) == [(topic, 0), (topic, 1)]
    assert lookup.offsets([(topic, 0), (topic, 1)]) == ({(topic, 0): 0, (topic, 1): 0}, {(topic, 0): 60, (topic, 1): 10})

    records, counts, _ = _read(client, topic, 0, 10, 30)
    assert _offsets(records) == list(range(10, 30))
    assert [value for _, _, value in records] == [order(i).encode() for i in range(10, 30)]
    assert [key for _, key, _ in records] == [f"customer-{i % 50}".encode() for i in range(10, 30)]
    assert counts == RangeCounts(records=20, offsets_without_records=0)

    # The whole partition up to its end, in batches of at most 7 records, in offset order.
    records, counts, sizes = _read(client, topic, 0, 0, 60, batch_records=7)
    assert _ids(records) == list(range(60)) and _offsets(records) == list(range(60))
    assert max(sizes) <= 7 and sum(sizes) == 60
    assert counts == RangeCounts(records=60, offsets_without_records=0)

    # A byte budget bounds batches too (a record here is about 85 bytes with key and overhead).
    records, counts, sizes = _read(client, topic, 0, 0, 60, batch_bytes=1000)
    assert _ids(records) == list(range(60)) and counts == RangeCounts(60, 0)
    assert len(sizes) >= 5 and max(sizes) <= 13

    assert _ids(_read(client, topic, 1, 0, 10)[0]) == list(range(60, 70))
    assert _ids(_read(client, topic, 0, 59, 60)[0]) == [59]
    assert _read(client, topic, 0, 5, 5) == ([], RangeCounts(), [])


def test_transactions_aborted_records_are_gaps_and_an_open_one_holds_the_end(kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 1)
    producer = transactions_ending_in_an_open_one(kafka_broker, topic)
    client = client_for(kafka_broker)
    uncommitted = client_for(kafka_broker, **{"isolation.level": "read_uncommitted"})

    # read_committed: the end is the last stable offset, before the open transaction.
    assert OffsetLookup(client).offsets([(topic, 0)])[1] == {(topic, 0): 18}
    assert OffsetLookup(uncommitted).offsets([(topic, 0)])[1] == {(topic, 0): 23}

    records, counts, _ = _read(client, topic, 0, 0, 18)
    assert _ids(records) == list(range(10)) and _offsets(records) == [0, 1, 2, 3, 4, 12, 13, 14, 15, 16]
    assert counts == RangeCounts(records=10, offsets_without_records=8)
    # A range ending on a commit marker with records after it; one of only aborted records and a
    # marker; one ending on a marker right before the open transaction (the end of what can be read).
    assert _read(client, topic, 0, 0, 6)[:2] == (records[:5], RangeCounts(5, 1))
    assert _read(client, topic, 0, 6, 12)[:2] == ([], RangeCounts(0, 6))
    assert _read(client, topic, 0, 12, 18)[:2] == (records[5:], RangeCounts(5, 1))
    # Past the last stable offset nothing can be read under read_committed: the range fails, loudly.
    with pytest.raises(IcebergSyncError, match=r"ends at offset 18, below the range's end 20: records that should exist"):
        _read(client, topic, 0, 0, 20)
    # read_uncommitted sees the aborted and the open records.
    assert _ids(_read(uncommitted, topic, 0, 0, 23)[0]) == [*range(5), *range(100, 105), *range(5, 15)]

    producer.commit()                        # commit marker 23
    assert OffsetLookup(client).offsets([(topic, 0)])[1] == {(topic, 0): 24}
    records, counts, _ = _read(client, topic, 0, 18, 24)
    assert _ids(records) == list(range(10, 15)) and counts == RangeCounts(5, 1)


def test_a_compacted_topic_has_gaps_and_ranges_stop_on_them(kafka_broker: KafkaBroker) -> None:
    topic = f"compacted-{time.monotonic_ns()}"
    kafka_broker.create_topic(topic, 1, {"cleanup.policy": "compact", "segment.ms": "100",
                                         "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})

    def produce(keys: list[str], value: str) -> None:
        kafka_broker.produce(topic, [(key, json.dumps({"key": key, "value": value}), 0) for key in keys])

    produce([f"k{i}" for i in range(10)], "first")     # offsets 0-9
    time.sleep(0.3)                                    # later appends roll the segment (segment.ms)
    produce(["k3", "k4", "k5"], "second")              # offsets 10-12 replace offsets 3-5
    time.sleep(0.3)
    produce(["tail"], "roll")                          # offset 13 in a new active segment: 0-12 can be cleaned
    deadline = time.monotonic() + 120
    while 3 in {r.offset for r in kafka_broker.consume(topic)}:
        assert time.monotonic() < deadline, "the log cleaner never compacted the topic"
        time.sleep(0.5)
        produce(["tail"], "roll")                      # keep rolling segments until the cleaner runs
    end = kafka_broker.end_offsets(topic)[0]
    survivors = [r.offset for r in kafka_broker.consume(topic)]
    assert survivors[:6] == [0, 1, 2, 6, 7, 8]
    client = client_for(kafka_broker)

    records, counts, _ = _read(client, topic, 0, 0, end)
    assert _offsets(records) == survivors
    assert counts == RangeCounts(records=len(survivors), offsets_without_records=end - len(survivors))
    # Ending on a gap (3-5 hold no record; the next record, 6, lies past the end and is not returned).
    records, counts, _ = _read(client, topic, 0, 0, 6)
    assert _offsets(records) == [0, 1, 2] and counts == RangeCounts(3, 3)
    # Only gap, and starting in a gap.
    assert _read(client, topic, 0, 3, 6)[:2] == ([], RangeCounts(0, 3))
    records, counts, _ = _read(client, topic, 0, 4, 8)
    assert _offsets(records) == [6, 7] and counts == RangeCounts(2, 2)


def test_records_that_should_exist_but_do_not_fail_the_read(kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 1)
    produce_orders(kafka_broker, topic, range(20), partition=0)
    client = client_for(kafka_broker)
    with pytest.raises(IcebergSyncError, match=r"ends at offset 20, below the range's end 25"):
        _read(client, topic, 0, 10, 25)
    # Records deleted (retention) after the range was planned: the start is gone.
    assert kafka_broker.delete_records(topic, 0, 10) == 10
    with pytest.raises(IcebergSyncError, match=r"reading .*/0 \[5, 15\) failed at offset 5: .*were the records deleted"):
        _read(client, topic, 0, 5, 15)
    assert _ids(_read(client, topic, 0, 10, 15)[0]) == list(range(10, 15))


@pytest.mark.parametrize("listener", [name for name in LISTENERS if name != "plaintext"])
def test_secured_listeners_read_a_range(kafka_broker: KafkaBroker, listener: str) -> None:
    topic = new_topic(kafka_broker, 1)
    produce_orders(kafka_broker, topic, range(10), partition=0)
    client = client_for(kafka_broker, listener)
    lookup = OffsetLookup(client)
    assert lookup.partitions([topic]) == [(topic, 0)]
    assert lookup.offsets([(topic, 0)]) == ({(topic, 0): 0}, {(topic, 0): 10})
    records, counts, _ = _read(client, topic, 0, 2, 8)
    assert _ids(records) == list(range(2, 8)) and counts == RangeCounts(6, 0)


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("listener", "change", "message"), [
    ("sasl-plain", {"sasl.password": "wrong"}, "SASL authentication error"),
    ("sasl-scram-256", {"sasl.password": "wrong"}, "SASL authentication error"),
    ("sasl-scram-512", {"sasl.username": "nobody"}, "SASL authentication error"),
    ("ssl", {"ca.crt": None}, "certificate verify failed"),
    ("mtls", {"ssl.keystore.certificate.chain": None, "ssl.keystore.key": None}, "certificate"),
])
def test_bad_credentials_fail_with_the_brokers_reason_not_a_hang(
        kafka_broker: KafkaBroker, listener: str, change: dict[str, str | None], message: str) -> None:
    from spark_app.sources.kafka import source_options

    topic = new_topic(kafka_broker, 1)
    produce_orders(kafka_broker, topic, range(3), partition=0)
    bootstrap, options, secret = listener_config(kafka_broker, listener)
    for key, value in change.items():
        if value is None:
            secret.pop(key)
        else:
            secret[key] = value
    if listener == "mtls":
        options.pop("ssl.keystore.type")
    client = source_options(bootstrap, options, secret, "spec.source.kafka.options").client
    with pytest.raises(KafkaAccessError, match=f"the broker refused the client: .*{message}"):
        OffsetLookup(client).partitions([topic])
    with pytest.raises(KafkaAccessError, match=f"reading {topic}/0 \\[0, 3\\): the broker refused the client: .*{message}"):
        _read(client, topic, 0, 0, 3)


def test_units_split_a_partition_for_the_cores_and_tile_the_range(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 2)
    produce_orders(kafka_broker, topic, range(12_000), partition=0)
    produce_orders(kafka_broker, topic, range(12_000, 12_100), partition=1)
    sync = parse_spec(kafka_document(tmp_path, kafka_broker, topic))
    source = KafkaSource(spark, sync.spec)
    pending = source.pending({}, 1 << 40)
    assert pending is not None
    units = source.plan_units({}, pending)
    assert all(isinstance(u, KafkaUnit) for u in units)
    assert [u.index for u in units] == list(range(len(units)))
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for unit in units:
        assert isinstance(unit, KafkaUnit) and unit.topic == topic
        by_partition.setdefault(unit.partition, []).append((unit.start, unit.end))
    # 2 cores: the big partition alone is split so that both have work; the small one stays whole.
    assert by_partition[1] == [(0, 100)]
    assert len(by_partition[0]) == source.cores() and by_partition[0][0][0] == 0 and by_partition[0][-1][1] == 12_000
    assert all(a[1] == b[0] for a, b in zip(by_partition[0], by_partition[0][1:], strict=False))
    # Reading every unit gives every record once.
    ids = []
    for unit in units:
        assert isinstance(unit, KafkaUnit)
        ids.extend(_ids(_read(source.options.client, unit.topic, unit.partition, unit.start, unit.end)[0]))
    assert sorted(ids) == list(range(12_100))


def test_a_job_over_sasl_ssl_with_credentials_from_the_secret(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole job: SCRAM-SHA-512 over TLS, the JAAS line and the CA from the mounted Secret; a
    transaction's marker inside the range is counted as an offset without a record."""
    topic = new_topic(kafka_broker, 1)
    produce_orders(kafka_broker, topic, range(40), partition=0)
    producer = TransactionalProducer(kafka_broker)
    producer.send(topic, range(40, 50))
    producer.commit()                                  # offsets 40-49, marker 50
    bootstrap, options, secret = listener_config(kafka_broker, "sasl-ssl-scram-512")
    secrets = tmp_path / "secrets"
    (secrets / "orders-kafka").mkdir(parents=True)
    for key, value in secret.items():
        (secrets / "orders-kafka" / key).write_text(value)
    monkeypatch.setenv("ICEBERGSYNC_SECRETS_DIR", str(secrets))
    document = kafka_document(tmp_path, kafka_broker, topic, source={
        "bootstrapServers": bootstrap, "options": options, "secretRef": {"name": "orders-kafka"}})
    assert kafka_broker.security.users["SCRAM-SHA-512"][1] not in json.dumps(document)
    sync = parse_spec(document)
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: last_frontier(catalog.load_table("sales.orders")) == {topic: {"0": 51}},
                           "every offset committed")
    table = catalog.load_table("sales.orders")
    assert table_ids(table) == list(range(50))
    notes = [json.loads(s[SOURCE_NOTES]) for s in data_summaries(table) if SOURCE_NOTES in s]
    assert sum(n.get("offsets-without-records", 0) for n in notes) == 1


def test_with_a_transform_a_transaction_marker_is_still_counted_once(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    """``spec.transform`` reads each unit once per branch (good rows, dead letters): the offsets
    without a record still reach the commit's source notes, counted once."""
    topic = new_topic(kafka_broker, 1)
    produce_orders(kafka_broker, topic, range(20), partition=0)
    producer = TransactionalProducer(kafka_broker)
    producer.send(topic, range(20, 30))
    producer.commit()                                  # offsets 20-29, marker 30
    sync = parse_spec(kafka_document(tmp_path, kafka_broker, topic, transform="SELECT * FROM source WHERE id % 2 = 0",
                                     deadLetter={"table": "sales.orders_dlq"}))
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: last_frontier(catalog.load_table("sales.orders")) == {topic: {"0": 31}},
                           "every offset committed")
    table = catalog.load_table("sales.orders")
    assert table_ids(table) == list(range(0, 30, 2))
    notes = [json.loads(s[SOURCE_NOTES]) for s in data_summaries(table) if SOURCE_NOTES in s]
    assert sum(n.get("offsets-without-records", 0) for n in notes) == 1
