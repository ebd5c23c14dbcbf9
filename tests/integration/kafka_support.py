"""Helpers for the Kafka tests: keyed JSON order messages, Kafka sync documents, frontier coverage."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer as ClientProducer
from confluent_kafka.admin import AdminClient, NewPartitions
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from spark_app.sources.kafka import source_options
from spark_app.sources.kafka_client import ClientSettings
from tests.infra.services import HOST, KafkaBroker, free_port
from tests.integration.sync_support import sink_commits, sync_document

SCHEMA = [
    {"name": "id", "type": "long", "required": True},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"},
]


def new_topic(broker: KafkaBroker, partitions: int = 3, prefix: str = "orders") -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions)
    return topic


def order(i: int) -> str:
    return json.dumps({"id": i, "customer": f"c{i % 7}", "amount": round(i * 0.25, 2)})


def produce_orders(broker: KafkaBroker, topic: str, ids: range | list[int],
                   partition: int | None = None) -> dict[int, tuple[int, int]]:
    """Produce keyed order messages; returns id -> (partition, offset)."""
    ids = list(ids)
    placed = broker.produce(topic, [(f"customer-{i % 50}", order(i), partition) for i in ids])
    return dict(zip(ids, placed, strict=True))


def kafka_source(broker: KafkaBroker, topic: str, **settings: Any) -> dict[str, Any]:
    return {"kafka": {"bootstrapServers": broker.bootstrap_servers, "topic": topic, **settings}}


def kafka_document(directory: Path, broker: KafkaBroker, topic: str, *, source: dict[str, Any] | None = None,
                   **spec: Any) -> dict[str, Any]:
    spec.setdefault("schema", SCHEMA)
    return sync_document(directory, kafka_source(broker, topic, **(source or {})), **spec)


def covered_ids(placed: dict[int, tuple[int, int]], frontier: dict[str, Any] | None, topic: str) -> list[int]:
    """The ids whose offsets a frontier says are in the table."""
    ends = {int(p): int(o) for p, o in ((frontier or {}).get(topic) or {}).items()}
    return sorted(i for i, (p, o) in placed.items() if o < ends.get(p, 0))


def frontier_reached(catalog: Catalog, topic: str, ends: dict[int, int], table: str = "sales.orders",
                     sink_id: str = "test/orders") -> Callable[[], bool]:
    """Whether the sink's newest commit on ``table`` has reached ``ends`` (each partition's end offset) of ``topic``."""
    def reached() -> bool:
        commits = sink_commits(catalog.load_table(table), sink_id)
        frontier = (commits[-1].frontier or {}).get(topic, {}) if commits else {}
        return {int(p): int(o) for p, o in frontier.items()} == ends

    return reached


def last_frontier(table: Table, sink_id: str = "test/orders") -> dict[str, Any] | None:
    commits = sink_commits(table, sink_id)
    return commits[-1].frontier if commits else None


def data_summaries(table: Table, sink_id: str = "test/orders") -> list[dict[str, str]]:
    """The snapshot summaries of the sink's data commits on main, oldest first."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    return [by_id[c.snapshot_id].summary.additional_properties  # type: ignore[union-attr]
            for c in sink_commits(table, sink_id) if c.kind == "data"]


class Producer:
    """Produce ids in chunks from a thread while jobs run; ``placed`` maps id -> (partition, offset).

    With ``total=None`` it produces until ``stop()``; ids then are ``range(first, first + len(placed))``.
    """

    def __init__(self, broker: KafkaBroker, topic: str, total: int | None, chunk: int, pause: float,
                 first: int = 0):
        self.placed: dict[int, tuple[int, int]] = {}
        self.error: BaseException | None = None
        self._args = (broker, topic, total, chunk, pause, first)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        broker, topic, total, chunk, pause, first = self._args
        start = first
        try:
            while not self._stop.is_set() and (total is None or start < first + total):
                end = start + chunk if total is None else min(first + total, start + chunk)
                self.placed.update(produce_orders(broker, topic, range(start, end)))
                start = end
                self._stop.wait(pause)
        except BaseException as exc:  # handed to the test by join()
            self.error = exc

    def start(self) -> Producer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self) -> dict[int, tuple[int, int]]:
        self._thread.join(300)
        assert not self._thread.is_alive(), "the producer did not finish"
        if self.error is not None:
            raise self.error
        return self.placed


# -- the Python client (confluent-kafka) against the test broker's listeners ----------------------

LISTENERS = ("plaintext", "sasl-plain", "sasl-scram-256", "sasl-scram-512", "ssl", "sasl-ssl-scram-512", "mtls")


def listener_config(broker: KafkaBroker, listener: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """``(bootstrapServers, options, Secret keys)`` as a user writes them for one of the broker's listeners
    (the Secret's keys in the spellings Kafka users know: sasl.jaas.config, ssl.truststore.certificates, ca.crt)."""
    security = broker.security
    ca = security.ca_pem.read_text()
    if listener == "plaintext":
        return broker.bootstrap_servers, {}, {}
    if listener.startswith("sasl-") and not listener.startswith("sasl-ssl"):
        mechanism = {"sasl-plain": "PLAIN", "sasl-scram-256": "SCRAM-SHA-256", "sasl-scram-512": "SCRAM-SHA-512"}[listener]
        user, password = security.users[mechanism]
        return (security.sasl_plaintext, {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism},
                {"sasl.username": user, "sasl.password": password})
    if listener == "ssl":
        return security.ssl, {"security.protocol": "SSL"}, {"ca.crt": ca}
    if listener == "sasl-ssl-scram-512":
        user, password = security.users["SCRAM-SHA-512"]
        jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'
        return (security.sasl_ssl, {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                    "ssl.truststore.type": "PEM"},
                {"sasl.jaas.config": jaas, "ssl.truststore.certificates": ca})
    if listener == "mtls":
        return (security.mtls, {"security.protocol": "SSL", "ssl.keystore.type": "PEM"},
                {"ssl.truststore.certificates": ca,
                 "ssl.keystore.certificate.chain": security.client_cert_pem.read_text(),
                 "ssl.keystore.key": security.client_key_pem.read_text()})
    raise ValueError(listener)


def client_for(broker: KafkaBroker, listener: str = "plaintext", **options: str) -> ClientSettings:
    """The source's client settings for a listener, through the same option/Secret mapping a spec takes."""
    bootstrap, base, secret = listener_config(broker, listener)
    return source_options(bootstrap, {**base, **options}, secret, "spec.source.kafka.options").client


def add_partitions(broker: KafkaBroker, topic: str, count: int) -> None:
    """Grow a topic to ``count`` partitions (confluent-kafka's AdminClient) and wait until the broker lists them."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})  # kept alive until its futures resolve
    for future in admin.create_partitions([NewPartitions(topic, count)]).values():
        future.result(30)
    deadline = time.monotonic() + 60
    while len(broker.end_offsets(topic)) < count:
        assert time.monotonic() < deadline, "the new partitions never appeared"
        time.sleep(0.2)


class TransactionalProducer:
    """confluent-kafka's Producer with a transactional.id; ``send`` leaves the transaction open."""

    def __init__(self, broker: KafkaBroker):
        self._producer = ClientProducer({"bootstrap.servers": broker.bootstrap_servers,
                                         "transactional.id": f"tx-{uuid.uuid4().hex}"})
        self._producer.init_transactions(30)

    def send(self, topic: str, ids: range, partition: int = 0) -> None:
        self._producer.begin_transaction()
        for i in ids:
            self._producer.produce(topic, key=f"k{i}", value=order(i), partition=partition)
        self._producer.flush(30)

    def commit(self) -> None:
        self._producer.commit_transaction(30)

    def abort(self) -> None:
        self._producer.abort_transaction(30)


def transactions_ending_in_an_open_one(broker: KafkaBroker, topic: str) -> TransactionalProducer:
    """On partition 0: ids 0-4 at offsets 0-4 committed (marker 5), ids 100-104 at 6-10 aborted (marker 11),
    ids 5-9 at 12-16 committed (marker 17), ids 10-14 at 18-22 in a transaction left open; returns its producer."""
    producer = TransactionalProducer(broker)
    producer.send(topic, range(0, 5))
    producer.commit()
    producer.send(topic, range(100, 105))
    producer.abort()
    producer.send(topic, range(5, 10))
    producer.commit()
    producer.send(topic, range(10, 15))
    return producer


class LateBroker:
    """A bootstrap address of ``broker`` with nothing listening on it until :meth:`open`; then every connection
    to it is forwarded to the broker (which names its own address to clients from then on): a broker that is
    unreachable when a sync starts and comes up later."""

    def __init__(self, broker: KafkaBroker):
        self.port = free_port()
        self._target = (HOST, broker.port)
        self._server: socket.socket | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    def open(self) -> None:
        self._server = socket.create_server((HOST, self.port))
        threading.Thread(target=self._accept, args=(self._server,), daemon=True).start()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:  # closed
                return
            upstream = socket.create_connection(self._target)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until either side closes; then close both."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.close()
