"""Kafka through confluent-kafka (librdkafka): client settings from a spec, offsets on the driver,
exact offset ranges in the tasks.

* :func:`client_settings` turns ``spec.source.kafka.options`` and the mounted ``secretRef`` into
  librdkafka settings: the keys Kafka users know (Java client names such as ``sasl.jaas.config`` or
  ``ssl.truststore.certificates`` included) are mapped, unknown or unsafe keys are refused with a
  :class:`SpecError` naming the field (docs/connectors.md lists them).
* :class:`OffsetLookup` (driver) lists partitions and earliest/latest offsets with an AdminClient;
  with ``read_committed`` the latest offset is the *last stable offset*.
* :func:`read_range` (tasks) reads exactly the records of ``[start, end)`` of one partition as Arrow
  batches: ``assign`` at ``start``, no consumer group commits (a throwaway ``group.id``,
  ``enable.auto.commit=false``), ``auto.offset.reset=error`` (a start the broker no longer has fails
  the read). Offsets without records (compaction, transaction markers, aborted records) are counted.

Every wait is bounded: authentication and TLS failures raise :class:`KafkaAccessError` at once with
the client's message; a read that makes no progress for ``stall_seconds`` raises.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from icebergsync.errors import IcebergSyncError, SpecError

log = logging.getLogger("icebergsync.source.kafka")
client_log = logging.getLogger("icebergsync.source.kafka.client")

READ_COMMITTED = "read_committed"
SUPPORTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
LOOKUP_TIMEOUT_SECONDS = 30.0
STALL_SECONDS = 120.0
BATCH_RECORDS = 20_000
BATCH_BYTES = 32 * 1024 * 1024
POLL_SECONDS = 0.5
# librdkafka's defaults prefetch up to 64 MiB per partition: a range reader needs far less. Once the
# prefetch queue is full, librdkafka postpones the partition's next fetch by fetch.queue.backoff.ms
# (default 1 s): a reader draining the queue faster than that sat idle most of the time (measured on
# one partition: 300k records in 3.9 s with the defaults, 0.5 s with a 10 ms backoff and 8 MiB
# fetches). Larger fetches per partition: a range reader reads one partition.
# A reader reads a range whose records already exist: the broker's long poll (fetch.wait.max.ms, 500 ms in
# librdkafka) only ever waits at the range's tail, for a record past it or the partition's end.
DEFAULT_CONSUMER = {"queued.max.messages.kbytes": "16384", "metadata.max.age.ms": "10000",
                    "fetch.queue.backoff.ms": "10", "max.partition.fetch.bytes": "8388608",
                    "fetch.wait.max.ms": "20"}

RAW_SCHEMA = pa.schema([("offset", pa.int64()), ("key", pa.binary()), ("value", pa.binary())])

# Keys passed to librdkafka as they are (same name, same meaning as in the Java client where both exist).
CONNECTION_KEYS = {
    "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
    "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location",
    "ssl.key.pem", "ssl.key.password", "ssl.keystore.location", "ssl.keystore.password", "ssl.cipher.suites",
    "ssl.curves.list", "ssl.sigalgs.list", "ssl.endpoint.identification.algorithm",
    "client.id", "client.rack", "client.dns.lookup", "socket.timeout.ms", "socket.connection.setup.timeout.ms",
    "socket.keepalive.enable", "socket.receive.buffer.bytes", "socket.send.buffer.bytes", "connections.max.idle.ms",
    "reconnect.backoff.ms", "reconnect.backoff.max.ms", "metadata.max.age.ms", "topic.metadata.refresh.interval.ms",
    "broker.address.family", "debug",
}
# Consumer tuning, only for the tasks' consumers.
FETCH_KEYS = {
    "fetch.max.bytes", "fetch.min.bytes", "max.partition.fetch.bytes", "fetch.wait.max.ms",
    "queued.max.messages.kbytes", "queued.min.messages", "receive.message.max.bytes", "check.crcs",
}
# Java client names -> librdkafka names (same meaning).
RENAMED = {"sasl.mechanisms": "sasl.mechanism", "fetch.max.wait.ms": "fetch.wait.max.ms",
           "ssl.truststore.certificates": "ssl.ca.pem", "ssl.keystore.certificate.chain": "ssl.certificate.pem",
           "ssl.keystore.key": "ssl.key.pem",
           # the keys of a Strimzi/cert-manager TLS Secret
           "ca.crt": "ssl.ca.pem", "user.crt": "ssl.certificate.pem", "user.key": "ssl.key.pem",
           "tls.crt": "ssl.certificate.pem", "tls.key": "ssl.key.pem"}
# Handled specially (see client_settings).
SPECIAL_KEYS = {"isolation.level", "sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.type",
                "ssl.keystore.type", "enable.ssl.certificate.verification"}
# Keys whose values are secrets: only from the Secret (or an ${env:...} reference), never in the spec.
SECRET_KEYS = {"sasl.password", "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
               "ssl.keystore.key", "user.key", "tls.key"}
# Set by icebergsync itself: the range read and where progress lives are not the spec's to change.
RESERVED = {
    "bootstrap.servers": "use spec.source.kafka.bootstrapServers",
    "group.id": "icebergsync reads without a consumer group (the table holds the offsets)",
    "group.instance.id": "icebergsync reads without a consumer group (the table holds the offsets)",
    "enable.auto.commit": "icebergsync never commits offsets to Kafka (the table holds them)",
    "enable.auto.offset.store": "icebergsync never commits offsets to Kafka (the table holds them)",
    "auto.offset.reset": "the range is read exactly; a start the broker no longer has fails the read",
    "enable.partition.eof": "set by icebergsync (it finds a range's end with it)",
    "allow.auto.create.topics": "icebergsync never creates topics",
    "key.deserializer": "records are read as bytes", "value.deserializer": "records are read as bytes",
    "interceptor.classes": "not supported",
}
UNSAFE = {
    "enable.ssl.certificate.verification": "the broker's certificate is always verified; trust its CA with "
                                           "ssl.ca.pem / ssl.truststore.certificates instead",
    "ssl.endpoint.identification.algorithm": "the broker's host name is always verified (https); give the "
                                             "broker a certificate for the name it is reached by",
}

_JAAS = re.compile(
    r"^\s*org\.apache\.kafka\.common\.security\.(plain\.PlainLoginModule|scram\.ScramLoginModule)\s+required"
    r"((?:\s+[A-Za-z_.]+\s*=\s*(?:\"(?:[^\"\\]|\\.)*\"|\S+?))*)\s*;\s*$", re.S)
_JAAS_OPTION = re.compile(r"([A-Za-z_.]+)\s*=\s*(?:\"((?:[^\"\\]|\\.)*)\"|([^\s;]+))")
_ENV_ONLY = re.compile(r"^\$\{env:[A-Za-z_][A-Za-z0-9_]*\}$")


@dataclass(frozen=True)
class ClientSettings:
    """librdkafka settings of one source: ``connection`` for every client, ``fetch`` for consumers."""

    bootstrap_servers: str
    connection: dict[str, str] = field(default_factory=dict)
    fetch: dict[str, str] = field(default_factory=dict)
    isolation_level: str = READ_COMMITTED


class KafkaAccessError(IcebergSyncError):
    """The broker refused the client: authentication (SASL) or TLS failed. Retrying will not help."""


def _parse_jaas(value: str, where: str, problems: list[str]) -> tuple[str, dict[str, str]] | None:
    match = _JAAS.match(value)
    if match is None:
        problems.append(f"{where}: only org.apache.kafka.common.security.plain.PlainLoginModule or "
                        "...scram.ScramLoginModule 'required username=\"...\" password=\"...\";' is supported")
        return None
    options = {m.group(1): (m.group(2) if m.group(2) is not None else m.group(3)).replace('\\"', '"')
               for m in _JAAS_OPTION.finditer(match.group(2))}
    unknown = sorted(set(options) - {"username", "password"})
    if unknown or "username" not in options or "password" not in options:
        problems.append(f"{where}: the login module needs exactly username and password (found {sorted(options)})")
        return None
    return match.group(1), options


def client_settings(bootstrap_servers: str, options: dict[str, str], raw_options: dict[str, str],
                    secret: dict[str, str], field_path: str) -> ClientSettings:
    """librdkafka settings from the spec's ``options`` (``${env:...}`` already resolved; ``raw_options``
    as written, to tell references from literal secrets) and the mounted Secret's keys.

    A ``kafka.`` prefix is accepted (the Spark connector's spelling). Problems are collected and raised
    as one :class:`SpecError`, each naming its field (``spec.source.kafka.options.<key>`` or
    ``secretRef.<key>``).
    """
    problems: list[str] = []
    connection: dict[str, str] = {}
    fetch: dict[str, str] = {}
    isolation = READ_COMMITTED
    jaas: tuple[str, dict[str, str], str] | None = None
    truststore_type = keystore_type = None
    truststore_location: tuple[str, str] | None = None
    for origin, values in ((field_path, options), ("secretRef", secret)):
        for given, value in values.items():
            key = given.removeprefix("kafka.")
            key = RENAMED.get(key, key)
            where = f"{origin}.{given}"
            if key in RESERVED:
                problems.append(f"{where}: set by icebergsync itself ({RESERVED[key]})")
            elif key in UNSAFE:
                safe = (key == "ssl.endpoint.identification.algorithm" and value.lower() == "https") or (
                    key == "enable.ssl.certificate.verification" and value.lower() == "true")
                if not safe:
                    problems.append(f"{where}: refused, unsafe ({UNSAFE[key]})")
            elif origin != "secretRef" and (given.removeprefix("kafka.") in SECRET_KEYS or key in SECRET_KEYS) \
                    and not _ENV_ONLY.match(raw_options.get(given, "")):
                problems.append(f"{where}: a credential; put it in the Secret named by secretRef "
                                "(or reference an environment variable: ${env:NAME})")
            elif key == "isolation.level":
                if value not in (READ_COMMITTED, "read_uncommitted"):
                    problems.append(f"{where}: read_committed or read_uncommitted, not {value!r}")
                isolation = value
            elif key == "sasl.jaas.config":
                parsed = _parse_jaas(value, where, problems)
                if parsed is not None:
                    jaas = (parsed[0], parsed[1], where)
            elif key == "ssl.truststore.type":
                truststore_type = (value.upper(), where)
            elif key == "ssl.keystore.type":
                keystore_type = (value.upper(), where)
            elif key == "ssl.truststore.location":
                truststore_location = (value, where)
            elif key in CONNECTION_KEYS:
                connection[key] = value
            elif key in FETCH_KEYS:
                fetch[key] = value
            else:
                problems.append(f"{where}: not a supported Kafka client setting (see docs/connectors.md, "
                                "'Options and credentials')")
    protocol = connection.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SUPPORTED_PROTOCOLS:
        problems.append(f"{field_path}.security.protocol: one of {', '.join(SUPPORTED_PROTOCOLS)}, not {protocol!r}")
    if "security.protocol" in connection:
        connection["security.protocol"] = protocol
    mechanism = connection.get("sasl.mechanism")
    if mechanism is not None:
        mechanism = connection["sasl.mechanism"] = mechanism.upper()
        if mechanism not in SUPPORTED_MECHANISMS:
            problems.append(f"{field_path}.sasl.mechanism: one of {', '.join(SUPPORTED_MECHANISMS)}, not {mechanism!r}")
    if jaas is not None:
        module, credentials, where = jaas
        expected = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        if mechanism is not None and module != expected:
            problems.append(f"{where}: {module} does not go with sasl.mechanism {mechanism}")
        if "sasl.username" in connection or "sasl.password" in connection:
            problems.append(f"{where}: give either sasl.jaas.config or sasl.username/sasl.password, not both")
        connection["sasl.username"], connection["sasl.password"] = credentials["username"], credentials["password"]
        if mechanism is None:
            connection["sasl.mechanism"] = mechanism = "PLAIN" if module.startswith("plain") else "SCRAM-SHA-512"
            if module.startswith("scram"):
                problems.append(f"{where}: a ScramLoginModule needs sasl.mechanism (SCRAM-SHA-256 or SCRAM-SHA-512)")
    if protocol.startswith("SASL_"):
        if mechanism is None:
            problems.append(f"{field_path}.sasl.mechanism: {protocol} needs one of {', '.join(SUPPORTED_MECHANISMS)}")
        if "sasl.username" not in connection or "sasl.password" not in connection:
            problems.append(f"secretRef: {protocol} needs sasl.username and sasl.password, or sasl.jaas.config")
    elif mechanism is not None or "sasl.username" in connection:
        problems.append(f"{field_path}.security.protocol: SASL settings are given but the protocol is {protocol} "
                        "(SASL_PLAINTEXT or SASL_SSL)")
    if truststore_type is not None and truststore_type[0] != "PEM":
        problems.append(f"{truststore_type[1]}: only PEM truststores are supported (ssl.truststore.certificates "
                        "or ssl.ca.pem with the CA certificates; export a JKS with keytool -exportcert -rfc)")
    if truststore_location is not None:
        if truststore_type is None or truststore_type[0] != "PEM":
            problems.append(f"{truststore_location[1]}: a truststore file must be PEM (ssl.truststore.type: PEM), "
                            "or use ssl.ca.location")
        connection["ssl.ca.location"] = truststore_location[0]
    if keystore_type is not None:
        kind, where = keystore_type
        if kind == "PEM":
            if "ssl.keystore.location" in connection:
                problems.append(f"{where}: a PEM keystore is given as ssl.keystore.certificate.chain and ssl.keystore.key")
        elif kind != "PKCS12":
            problems.append(f"{where}: PKCS12 or PEM keystores only (JKS is not supported)")
    if "ssl.ca.pem" in connection and "ssl.ca.location" in connection:
        problems.append(f"{field_path}: give the CA either as content (ssl.ca.pem, ssl.truststore.certificates, "
                        "ca.crt) or as a file (ssl.ca.location, ssl.truststore.location), not both")
    uses_tls = protocol in ("SSL", "SASL_SSL")
    tls_keys = sorted(k for k in connection if k.startswith("ssl."))
    if tls_keys and not uses_tls:
        problems.append(f"{field_path}.security.protocol: TLS settings {tls_keys} are given but the protocol is "
                        f"{protocol} (SSL or SASL_SSL)")
    if problems:
        raise SpecError(problems)
    return ClientSettings(bootstrap_servers, connection, fetch, isolation)


# -- errors ---------------------------------------------------------------------------------------


class _Errors:
    """Collects the client's error events (``error_cb``); authentication/TLS failures are fatal."""

    def __init__(self) -> None:
        self.last: Any = None
        self.fatal: Any = None

    def __call__(self, error: Any) -> None:
        from confluent_kafka import KafkaError

        self.last = error
        text = error.str().lower()
        if error.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL) or error.fatal() or (
                error.code() == KafkaError._TRANSPORT and ("ssl" in text and "alert" in text)):
            self.fatal = self.fatal or error

    def check(self, what: str) -> None:
        if self.fatal is not None:
            raise KafkaAccessError(f"kafka source: {what}: the broker refused the client: {self.fatal.str()}")

    def describe(self) -> str:
        return f" (last client error: {self.last.str()})" if self.last is not None else ""


def _log_cb(settings: dict[str, Any]) -> dict[str, Any]:
    return {**settings, "logger": client_log}


# -- driver: partitions and offsets --------------------------------------------------------------

Offsets = dict[tuple[str, int], int]


class OffsetLookup:
    """Partitions and earliest/latest offsets from an AdminClient (no group, no commits). The latest
    offset is read with the source's isolation level: the last stable offset under read_committed."""

    def __init__(self, settings: ClientSettings, timeout: float = LOOKUP_TIMEOUT_SECONDS):
        self.settings = settings
        self.timeout = timeout
        self._admin: Any = None
        self._errors = _Errors()

    def _open(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._errors = _Errors()
            self._admin = AdminClient(_log_cb({
                **DEFAULT_CONSUMER_CONNECTION, **self.settings.connection,
                "bootstrap.servers": self.settings.bootstrap_servers, "allow.auto.create.topics": "false",
                "error_cb": self._errors}))
        return self._admin

    def close(self) -> None:
        self._admin = None  # librdkafka closes the handle when it is collected

    def partitions(self, topics: list[str]) -> list[tuple[str, int]]:
        """The topics' partitions (a topic that does not exist has none; it is never created)."""
        admin = self._open()
        found: list[tuple[str, int]] = []
        for topic in topics:
            metadata = self._list_topics(admin, topic, 2.0)
            meta = metadata.topics.get(topic)
            if meta is not None and meta.error is None:
                found.extend((topic, int(p)) for p in meta.partitions)
        return sorted(found)

    def _list_topics(self, admin: Any, topic: str | None, attempt_seconds: float) -> Any:
        """The cluster's metadata of ``topic`` (None: of every topic), asked again until ``self.timeout`` passes."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return admin.list_topics(topic=topic, timeout=min(attempt_seconds, max(0.1, deadline - time.monotonic())))
            except Exception:
                admin.poll(0)
                self._errors.check(f"listing topics at {self.settings.bootstrap_servers}")
                if time.monotonic() >= deadline:
                    raise

    def matching_partitions(self, pattern: re.Pattern[str]) -> list[tuple[str, int]]:
        """The partitions of every topic whose whole name ``pattern`` matches (Kafka's internal topics, named
        ``__…``, never), from one listing of the cluster's topics."""
        metadata = self._list_topics(self._open(), None, 5.0)
        return sorted((name, int(p)) for name, meta in metadata.topics.items()
                      if meta.error is None and not name.startswith("__") and pattern.fullmatch(name)
                      for p in meta.partitions)

    def offsets(self, partitions: list[tuple[str, int]]) -> tuple[Offsets, Offsets]:
        """(earliest, latest) offset of each partition."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not partitions:
            return {}, {}
        admin = self._open()
        isolation = (IsolationLevel.READ_COMMITTED if self.settings.isolation_level == READ_COMMITTED
                     else IsolationLevel.READ_UNCOMMITTED)
        result = []
        for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
            futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                         isolation_level=isolation, request_timeout=self.timeout)
            self._wait(list(futures.values()), "listing offsets")
            result.append({(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()})
        return result[0], result[1]

    def _wait(self, futures: list[Future[Any]], what: str) -> None:
        deadline = time.monotonic() + self.timeout + 5
        while True:
            _, pending = wait_futures(futures, timeout=0.2)
            self._admin.poll(0)
            self._errors.check(f"{what} at {self.settings.bootstrap_servers}")
            if not pending:
                return
            if time.monotonic() > deadline:
                raise IcebergSyncError(f"kafka source: {what} timed out{self._errors.describe()}")


DEFAULT_CONSUMER_CONNECTION = {"metadata.max.age.ms": DEFAULT_CONSUMER["metadata.max.age.ms"]}


# -- tasks: exact ranges --------------------------------------------------------------------------


@dataclass
class RangeCounts:
    """What reading ``[start, end)`` found: records, and offsets that hold none."""

    records: int = 0
    offsets_without_records: int = 0


def read_range(settings: ClientSettings, topic: str, partition: int, start: int, end: int,
               counts: RangeCounts | None = None, *, batch_records: int = BATCH_RECORDS,
               batch_bytes: int = BATCH_BYTES, stall_seconds: float = STALL_SECONDS) -> Iterator[pa.RecordBatch]:
    """The records of offsets ``[start, end)`` of one partition as :data:`RAW_SCHEMA` batches, in offset order.

    Stops at ``end`` also when the last offsets of the range hold no record: a record at or past
    ``end`` arrives (it is not returned) or the partition's end (EOF) is at or past ``end``. Raises when
    the broker no longer has ``start`` (retention), when the partition ends below ``end`` (records
    that should exist are missing), when a record outside the range or out of order arrives, and when
    nothing arrives for ``stall_seconds``. ``counts`` receives the record count and the offsets
    without records.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    counts = counts if counts is not None else RangeCounts()
    if end <= start:
        return
    where = f"{topic}/{partition} [{start}, {end})"
    errors = _Errors()
    consumer = Consumer(_log_cb({
        **DEFAULT_CONSUMER, **settings.connection, **settings.fetch,
        "bootstrap.servers": settings.bootstrap_servers,
        "group.id": f"icebergsync-reader-{uuid.uuid4().hex}",  # never joined, never committed
        "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "error",
        "enable.partition.eof": True, "isolation.level": settings.isolation_level,
        "error_cb": errors}))
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        position = start  # every offset below it is accounted for
        offsets: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        size = total_bytes = 0
        last_progress = time.monotonic()
        done = False
        while not done:
            # Ask for no more than the range can still hold (its last record ends the read at once; when its
            # last offsets hold no record, a record past it, the EOF event or the position says so) and than
            # fits the batch's byte budget at the record size seen so far (before any: 1 KiB a record).
            seen = counts.records + len(offsets)
            average = (total_bytes // seen) if seen else 1024
            room = max(1, (batch_bytes - size) // max(1, average))
            messages = consumer.consume(num_messages=min(batch_records, end - position, room), timeout=POLL_SECONDS)
            errors.check(f"reading {where}")
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise IcebergSyncError(f"kafka source: reading {where} failed at offset {position}: "
                                               f"{error.str()} (were the records deleted after the range was "
                                               "planned?)" if error.code() == KafkaError._AUTO_OFFSET_RESET
                                               else f"kafka source: reading {where} failed: {error.str()}")
                    eof = int(message.offset() or 0)
                    if eof >= end:
                        done = True
                        break
                    _check_log_end(consumer, topic, partition, eof, end, where)
                    continue
                offset = int(message.offset() or 0)
                if offset < position:
                    raise IcebergSyncError(f"kafka source: reading {where}: got offset {offset} after offset "
                                           f"{position - 1}; records outside the range or out of order")
                if offset >= end:
                    done = True  # the next record lies past the range: everything in it was read
                    break
                offsets.append(offset)
                keys.append(message.key())
                value = message.value()
                values.append(value)
                record_bytes = len(value or b"") + len(keys[-1] or b"") + 24
                size += record_bytes
                total_bytes += record_bytes
                position = offset + 1
                if position == end:
                    done = True
                    break
            if messages:
                last_progress = time.monotonic()
            elif not done:
                if consumer.position([TopicPartition(topic, partition)])[0].offset >= end:
                    done = True  # the consumer moved past the range's last offsets (markers, compacted away)
                elif time.monotonic() - last_progress > stall_seconds:
                    raise IcebergSyncError(f"kafka source: reading {where}: nothing arrived for {stall_seconds:.0f}s "
                                           f"at offset {position}{errors.describe()}")
            if offsets and (done or len(offsets) >= batch_records or size >= batch_bytes):
                counts.records += len(offsets)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(offsets, pa.int64()), pa.array(keys, pa.binary()), pa.array(values, pa.binary())],
                    schema=RAW_SCHEMA)
                offsets, keys, values, size = [], [], [], 0
        counts.offsets_without_records += (end - start) - counts.records
    finally:
        consumer.close()


def _check_log_end(consumer: Any, topic: str, partition: int, eof: int, end: int, where: str) -> None:
    """The consumer reached the partition's end below ``end``: fine when the end has moved on since
    (the fetch saw an older end), an error when the broker's end really is below the range's end."""
    from confluent_kafka import TopicPartition

    _, latest = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=LOOKUP_TIMEOUT_SECONDS,
                                               cached=False)
    if latest is not None and latest < end:
        raise IcebergSyncError(
            f"kafka source: reading {where}: the partition ends at offset {latest}, below the range's end {end}: "
            f"records that should exist are missing (topic recreated or truncated?); nothing is committed")
    log.debug("kafka source: %s: end of partition at %d, the broker's end is now %s", where, eof, latest)
