"""Data-plane test fixtures: real Kafka (KRaft), Iceberg REST catalog and MinIO (S3) servers.

Everything runs from ``$ICEBERGSYNC_CACHE`` (default ``~/.cache/icebergsync``), filled by
``scripts/infra/services.sh``; a fixture runs that script for its own part first, which is a no-op
when the cache is warm (run ``scripts/infra/services.sh`` up front to pay the cold cost outside pytest).

Every server listens on 127.0.0.1 on a free port, logs to a file in pytest's tmp dir (its tail is
shown when it fails to start), runs under ``timeout --kill-after=10 <ttl>s`` and gets SIGTERM when
the pytest process dies (``PR_SET_PDEATHSIG``), and is stopped at the end of the session.

Fixtures (session scope):
  ``kafka_broker``     -> :class:`KafkaBroker` (``bootstrap_servers``, ``create_topic``, ``produce``,
                          ``end_offsets``, ``begin_offsets``, ``delete_records``, ``consume``, ...;
                          ``security``: its SASL_PLAINTEXT, SSL, SASL_SSL and mutual-TLS listeners
                          with users and a CA the run generates, see :class:`KafkaSecurity`)
  ``s3_server``        -> :class:`S3Server` (``endpoint``, ``access_key``, ``secret_key``, ``region``,
                          ``bucket``, ``fileio_properties``, ``filesystem()``)
  ``rest_catalog``     -> :class:`RestCatalog` with a local-directory warehouse
  ``rest_catalog_s3``  -> :class:`RestCatalog` with an ``s3://<bucket>/warehouse`` warehouse on MinIO
  ``nessie_catalog``   -> :class:`RestCatalog` on Project Nessie's server (in-memory version store), its
                          Iceberg REST endpoint ``/iceberg`` with an ``s3://<bucket>/nessie`` warehouse on
                          MinIO; its ``/v1/transactions/commit`` is atomic (one Nessie commit)
Plain functions: ``spark_jars(*bundles)`` -> jar paths of "iceberg-spark", "kafka-connector"
(for ``spark.jars``); ``spark_classpath(*bundles)`` -> the same joined for ``spark.driver.extraClassPath``.

Environment: ``ICEBERGSYNC_SERVICE_TTL`` (seconds a server may live, default 5400).
"""

from __future__ import annotations

import base64
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICES_SH = REPO_ROOT / "scripts" / "infra" / "services.sh"
HOST = "127.0.0.1"
SPARK_BUNDLES = ("iceberg-spark", "kafka-connector")
SERVICE_TTL = int(os.environ.get("ICEBERGSYNC_SERVICE_TTL", "5400"))
JAVA = os.environ.get("JAVA", "java")
# Short-lived, small JVMs: C1 only and serial GC start faster and use less CPU on a 2-core machine.
SMALL_JVM = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss1m", "-Djava.awt.headless=true"]


def cache_dir() -> Path:
    return Path(os.environ.get("ICEBERGSYNC_CACHE") or Path.home() / ".cache" / "icebergsync")


# --------------------------------------------------------------------------------------------
# cache preparation


_prepared: set[str] = set()
_prepare_lock = threading.Lock()


def ensure_services(part: str) -> None:
    """Run ``services.sh <part>`` once per session (fast no-op when the cache is warm)."""
    with _prepare_lock:
        if part in _prepared:
            return
        res = subprocess.run(
            ["bash", str(SERVICES_SH), part], capture_output=True, text=True, check=False, timeout=3000
        )
        if res.returncode != 0:
            raise RuntimeError(
                f"scripts/infra/services.sh {part} failed (exit {res.returncode}):\n{res.stderr[-4000:]}"
            )
        _prepared.add(part)


def spark_classpath(*bundles: str) -> str:
    """The same jars joined for ``spark.driver.extraClassPath``: in local mode this skips the copy
    Spark makes of every ``spark.jars`` entry per session."""
    return os.pathsep.join(spark_jars(*bundles))


def spark_jars(*bundles: str) -> list[str]:
    """Jar paths of the named bundles, for ``spark.jars`` (all of them when none is named).

    "iceberg-spark": iceberg-spark-runtime-4.0_2.13 + iceberg-aws-bundle (S3FileIO, AWS SDK 2.33);
    "kafka-connector": spark-sql-kafka-0-10 + kafka-clients, commons-pool2, token provider (the
    benchmark's Spark Kafka peer; the job reads Kafka with its own client).
    """
    names = bundles or SPARK_BUNDLES
    unknown = [b for b in names if b not in SPARK_BUNDLES]
    if unknown:
        raise ValueError(f"unknown Spark jar bundle(s) {unknown}; known: {SPARK_BUNDLES}")
    ensure_services("spark")
    jars: list[str] = []
    for name in names:
        d = cache_dir() / "jars" / name
        found = sorted(str(p) for p in d.glob("*.jar"))
        if not found:
            raise RuntimeError(f"no jars in {d}: run scripts/infra/services.sh spark")
        jars.extend(found)
    return jars


# --------------------------------------------------------------------------------------------
# process management

_PR_SET_PDEATHSIG = 1
# Linux only: have the kernel SIGTERM a server's `timeout` wrapper when pytest dies.
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


class ServerProcess:
    """A server under ``timeout`` in its own session, killed if the parent (pytest) dies."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        ttl: int = SERVICE_TTL,
        pipe_stdio: bool = False,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        parent = os.getpid()

        def _die_with_parent() -> None:  # runs in the child between fork and exec
            if _prctl is not None:
                _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:
                os._exit(1)

        cmd = ["timeout", "--kill-after=10", f"{ttl}s", *argv]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE if pipe_stdio else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipe_stdio else self._log,
            stderr=self._log,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def failure(self, message: str) -> RuntimeError:
        state = "running" if self.alive() else f"exited with {self.proc.returncode}"
        return RuntimeError(
            f"{self.name}: {message} ({state}); last lines of {self.log_path}:\n{self.tail()}"
        )

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise self.failure(f"exited while waiting for {what}")
            try:
                if ready():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise self.failure(f"not ready after {timeout:.0f}s waiting for {what}")
            time.sleep(0.1)

    def stop(self, grace: float = 15.0) -> None:
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            except ProcessLookupError:
                pass
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._log.close()


def _classpath(*dirs: Path) -> str:
    parts: list[str] = []
    for d in dirs:
        parts.append(str(d) if d.name == "classes" else str(d / "*"))
    return os.pathsep.join(parts)


def _log4j2_config(path: Path, level: str) -> Path:
    path.write_text(
        "status = warn\n"
        "appender.err.type = Console\n"
        "appender.err.name = STDERR\n"
        "appender.err.target = SYSTEM_ERR\n"
        "appender.err.layout.type = PatternLayout\n"
        "appender.err.layout.pattern = [%d] %p %m (%c)%n\n"
        f"rootLogger.level = {level}\n"
        "rootLogger.appenderRef.err.ref = STDERR\n"
    )
    return path


# --------------------------------------------------------------------------------------------
# Kafka


class KafkaRecord(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def _b64(data: bytes | str | None) -> str:
    if data is None:
        return "-"
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes | None:
    return None if text == "-" else base64.b64decode(text)


class _KafkaClient:
    """The long-lived Java helper (KafkaTestClient) speaking a line protocol over stdin/stdout."""

    def __init__(self, bootstrap: str, home: Path, log_dir: Path) -> None:
        log4j = _log4j2_config(log_dir / "client-log4j2.properties", "WARN")
        self._lock = threading.Lock()
        self.process = ServerProcess(
            "kafka test client",
            [
                JAVA,
                *SMALL_JVM,
                "-Xmx256m",
                f"-Dlog4j2.configurationFile={log4j}",
                "-cp",
                _classpath(home / "classes", home / "lib"),
                "icebergsync.testinfra.KafkaTestClient",
                bootstrap,
            ],
            log_dir / "kafka-client.log",
            pipe_stdio=True,
        )

    def call(self, *fields: object, body: Iterable[str] = ()) -> list[str]:
        line = "\t".join(str(f) for f in fields) + "\n"
        with self._lock:
            stdin, stdout = self.process.proc.stdin, self.process.proc.stdout
            assert stdin is not None and stdout is not None
            try:
                stdin.write(line.encode())
                for b in body:
                    stdin.write(b.encode() + b"\n")
                stdin.flush()
            except BrokenPipeError as e:
                raise self.process.failure("helper is gone") from e
            head = stdout.readline().decode().rstrip("\n")
            if not head:
                raise self.process.failure(f"no reply to {fields[0]}")
            status, _, rest = head.partition("\t")
            if status == "err":
                raise RuntimeError(f"kafka {fields[0]} failed: {rest}")
            return [stdout.readline().decode().rstrip("\n") for _ in range(int(rest))]

    def close(self) -> None:
        try:
            if self.process.alive() and self.process.proc.stdin is not None:
                self.process.proc.stdin.write(b"quit\n")
                self.process.proc.stdin.flush()
                self.process.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.process.stop()


@dataclass(frozen=True)
class KafkaSecurity:
    """The broker's secured listeners (all on 127.0.0.1) and what a client needs to use them.

    ``sasl_plaintext`` and ``sasl_ssl`` accept PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (``users``:
    mechanism -> (name, password); the PLAIN user is in the listener's JAAS config, the SCRAM users
    are written into the metadata log by ``kafka-storage format --add-scram``). ``ssl`` and
    ``sasl_ssl`` present a server certificate for IP 127.0.0.1 signed by ``ca_pem``, a CA generated
    by this test run (openssl); ``mtls`` (protocol SSL) also requires a client certificate signed by
    that CA: ``client_cert_pem`` / ``client_key_pem``. No authorizer: an authenticated user may do anything.
    """

    sasl_plaintext: str
    ssl: str
    sasl_ssl: str
    mtls: str
    ca_pem: Path
    client_cert_pem: Path
    client_key_pem: Path
    users: dict[str, tuple[str, str]]


@dataclass
class KafkaBroker:
    """A single-node KRaft broker+controller (Kafka 4.1.1) on 127.0.0.1."""

    bootstrap_servers: str
    port: int
    controller_port: int
    cluster_id: str
    data_dir: Path
    log_path: Path
    security: KafkaSecurity
    _server: ServerProcess = field(repr=False)
    _client: _KafkaClient = field(repr=False)

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        """Create a topic (replication 1) and wait until every partition has a leader."""
        extra = [f"{k}={v}" for k, v in (config or {}).items()]
        self._client.call("create_topic", name, partitions, *extra)

    def delete_topic(self, name: str) -> None:
        self._client.call("delete_topic", name)

    def list_topics(self) -> list[str]:
        return self._client.call("list_topics")

    def produce(
        self,
        topic: str,
        records: Iterable[tuple[Any, ...]],
    ) -> list[tuple[int, int]]:
        """Produce ``(key, value)`` or ``(key, value, partition|None)`` records (bytes, str or None),
        acks=all and idempotent, in order; returns each record's ``(partition, offset)``."""
        body: list[str] = []
        for rec in records:
            key, value = rec[0], rec[1]
            partition = rec[2] if len(rec) > 2 else None
            body.append(f"{'-' if partition is None else int(partition)}\t{_b64(key)}\t{_b64(value)}")
        if not body:
            return []
        rows = self._client.call("produce", topic, len(body), body=body)
        return [(int(p), int(o)) for p, o in (r.split("\t") for r in rows)]

    def _offsets(self, cmd: str, topic: str) -> dict[int, int]:
        return {int(p): int(o) for p, o in (r.split("\t") for r in self._client.call(cmd, topic))}

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Latest offset (high watermark) per partition."""
        return self._offsets("end_offsets", topic)

    def begin_offsets(self, topic: str) -> dict[int, int]:
        """Earliest available offset (log start) per partition."""
        return self._offsets("begin_offsets", topic)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Delete records below ``before_offset`` (as retention would); returns the new log start."""
        return int(self._client.call("delete_records", topic, partition, before_offset)[0])

    def consume(
        self, topic: str, timeout: float = 30.0, isolation: str = "read_uncommitted"
    ) -> list[KafkaRecord]:
        """Every record from the log start up to the end offsets read at call time."""
        rows = self._client.call("consume", topic, int(timeout * 1000), isolation)
        out = []
        for r in rows:
            p, o, k, v = r.split("\t")
            out.append(KafkaRecord(int(p), int(o), _unb64(k), _unb64(v)))
        return out

    def spark_options(self) -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.bootstrap_servers}


def _kafka_cluster_id() -> str:
    """A random cluster id as Kafka's own ``Uuid.randomUuid`` makes it: never starting with ``-``, which the
    storage tool's command line would take for an option."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


KAFKA_USERS = {  # mechanism -> (user, password) on the SASL listeners
    "PLAIN": ("alice", "alice-secret"),
    "SCRAM-SHA-256": ("bob", "bob-secret-256"),
    "SCRAM-SHA-512": ("carol", "carol-secret-512"),
}
_TLS_DAYS = "2"  # the certificates outlive any test run, not much more


def _openssl(*args: str, cwd: Path) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed:\n{res.stderr[-2000:]}")


def make_test_pki(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, all made here
    (openssl, RSA 2048, unencrypted PKCS#8 keys): ``ca``, ``server_keystore`` (key + chain, Kafka's
    PEM keystore), ``client_cert``, ``client_key``."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days",
             _TLS_DAYS, "-subj", "/CN=icebergsync test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    for name, usage, san in (("server", "serverAuth", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"),
                             ("client", "clientAuth", "")):
        (directory / f"{name}.ext").write_text(f"basicConstraints=CA:FALSE\nextendedKeyUsage={usage}\n{san}")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN=icebergsync test {name}", cwd=directory)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", _TLS_DAYS, "-extfile", f"{name}.ext", cwd=directory)
    keystore = directory / "server-keystore.pem"
    keystore.write_text((directory / "server.key").read_text() + (directory / "server.pem").read_text()
                        + (directory / "ca.pem").read_text())
    return {"ca": directory / "ca.pem", "server_keystore": keystore,
            "client_cert": directory / "client.pem", "client_key": directory / "client.key"}



# The settings of a cluster of one broker (every replication factor 1, no waits for other members).
SINGLE_BROKER_PROPERTIES = (
    "num.partitions=1",
    "default.replication.factor=1",
    "min.insync.replicas=1",
    "offsets.topic.replication.factor=1",
    "offsets.topic.num.partitions=1",
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "transaction.state.log.num.partitions=1",
    "share.coordinator.state.topic.replication.factor=1",
    "share.coordinator.state.topic.min.isr=1",
    "group.initial.rebalance.delay.ms=0",
    "auto.create.topics.enable=false",
)

def _sasl_listener_properties(listener: str) -> list[str]:
    plain_user, plain_password = KAFKA_USERS["PLAIN"]
    prefix = f"listener.name.{listener.lower()}"
    return [
        f"{prefix}.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        f"{prefix}.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_{plain_user}="{plain_password}";',
        f"{prefix}.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
        f"{prefix}.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
    ]


def start_kafka(workdir: Path, ttl: int = SERVICE_TTL) -> KafkaBroker:
    ensure_services("kafka")
    home = cache_dir() / "kafka"
    workdir.mkdir(parents=True, exist_ok=True)
    port, cport = free_port(), free_port()
    secured = {name: free_port() for name in ("SASL_PLAINTEXT", "SSL", "SASL_SSL", "MTLS")}
    pki = make_test_pki(workdir / "tls")
    data = workdir / "data"
    props = workdir / "server.properties"
    listeners = ",".join(f"{name}://{HOST}:{p}" for name, p in secured.items())
    props.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@{HOST}:{cport}",
                f"listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{cport},{listeners}",
                f"advertised.listeners=PLAINTEXT://{HOST}:{port},{listeners}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                "SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,MTLS:SSL",
                "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                *_sasl_listener_properties("SASL_PLAINTEXT"),
                *_sasl_listener_properties("SASL_SSL"),
                "ssl.keystore.type=PEM",
                f"ssl.keystore.location={pki['server_keystore']}",
                "ssl.client.auth=none",
                "listener.name.mtls.ssl.client.auth=required",
                "listener.name.mtls.ssl.truststore.type=PEM",
                f"listener.name.mtls.ssl.truststore.location={pki['ca']}",
                f"log.dirs={data}",
                *SINGLE_BROKER_PROPERTIES,
                "delete.topic.enable=true",
                "log.retention.check.interval.ms=1000",
                "log.cleaner.backoff.ms=500",  # compacted test topics are cleaned soon after a segment rolls
                "",
            ]
        )
    )
    jvm = _kafka_jvm(workdir)
    cluster_id = _kafka_cluster_id()
    fmt = subprocess.run(
        [
            JAVA,
            *SMALL_JVM,
            "-Xmx256m",
            *jvm,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(props),
            *(arg for mechanism, (user, password) in KAFKA_USERS.items() if mechanism.startswith("SCRAM-")
              for arg in ("--add-scram", f"{mechanism}=[name={user},password={password}]")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if fmt.returncode != 0:
        raise RuntimeError(f"kafka storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
    log_path = workdir / "kafka.log"
    server = _kafka_server(workdir, ttl)
    client: _KafkaClient | None = None
    try:
        # start the client JVM while the broker boots; it retries until the broker answers
        client = _KafkaClient(f"{HOST}:{port}", home, workdir)
        server.wait_until(lambda: all(_port_open(p) for p in (port, *secured.values())), 120, "its listeners")
        got = client.call("ping")
        if got != [cluster_id]:
            raise server.failure(f"unexpected cluster id {got}")
    except BaseException:
        if client is not None:
            client.close()
        server.stop()
        raise
    security = KafkaSecurity(
        sasl_plaintext=f"{HOST}:{secured['SASL_PLAINTEXT']}", ssl=f"{HOST}:{secured['SSL']}",
        sasl_ssl=f"{HOST}:{secured['SASL_SSL']}", mtls=f"{HOST}:{secured['MTLS']}", ca_pem=pki["ca"],
        client_cert_pem=pki["client_cert"], client_key_pem=pki["client_key"], users=dict(KAFKA_USERS))
    return KafkaBroker(f"{HOST}:{port}", port, cport, cluster_id, data, log_path, security, server, client)


def _kafka_jvm(workdir: Path) -> list[str]:
    """The JVM options of the Kafka tools and broker of ``workdir`` (its log4j configuration, written here)."""
    log4j = _log4j2_config(workdir / "log4j2.properties", "INFO")
    return [f"-Dlog4j2.configurationFile={log4j}", "-cp", _classpath(cache_dir() / "kafka" / "lib")]


def _kafka_server(workdir: Path, ttl: int) -> ServerProcess:
    """The broker of ``workdir`` (its ``server.properties`` and data directory), started."""
    return ServerProcess(
        "kafka broker",
        [JAVA, "-Xms256m", "-Xmx768m", "-XX:+UseSerialGC", "-Djava.awt.headless=true", *_kafka_jvm(workdir),
         "kafka.Kafka", str(workdir / "server.properties")],
        workdir / "kafka.log",
        cwd=workdir,
        ttl=ttl,
    )


def restart_kafka(broker: KafkaBroker, down_seconds: float = 0.0, ttl: int = SERVICE_TTL) -> None:
    """Stop the broker (SIGTERM), leave it down ``down_seconds``, and start it again on the same data directory and
    ports; returns once it answers (the test client reconnects by itself)."""
    broker._server.stop()
    time.sleep(down_seconds)
    broker._server = _kafka_server(broker.data_dir.parent, ttl)
    broker._server.wait_until(lambda: _port_open(broker.port), 120, "its listener")
    if broker._client.call("ping") != [broker.cluster_id]:
        raise broker._server.failure("another cluster answered after the restart")


def stop_kafka(broker: KafkaBroker) -> None:
    broker._client.close()
    broker._server.stop()


# --------------------------------------------------------------------------------------------
# S3 (MinIO)


@dataclass
class S3Server:
    endpoint: str  # http://127.0.0.1:<port>
    access_key: str
    secret_key: str
    region: str
    bucket: str
    data_dir: Path
    log_path: Path
    _server: ServerProcess = field(repr=False)

    @property
    def fileio_properties(self) -> dict[str, str]:
        """pyiceberg (and Iceberg Java S3FileIO) properties for this server."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": self.region,
            "s3.path-style-access": "true",
        }

    def filesystem(self) -> Any:
        """A pyarrow S3FileSystem on this server (path-style, http)."""
        from pyarrow import fs

        return fs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
            endpoint_override=self.endpoint,
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
        )

    def create_bucket(self, name: str) -> str:
        self.filesystem().create_dir(name)
        return name

    def iceberg_spark_catalog_conf(self, prefix: str) -> dict[str, str]:
        """S3FileIO settings for a Spark Iceberg catalog named by ``prefix`` (spark.sql.catalog.<x>)."""
        return {
            f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            f"{prefix}.s3.endpoint": self.endpoint,
            f"{prefix}.s3.path-style-access": "true",
            f"{prefix}.s3.access-key-id": self.access_key,
            f"{prefix}.s3.secret-access-key": self.secret_key,
            f"{prefix}.client.region": self.region,
        }


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(200 <= r.status < 300)
    except (urllib.error.URLError, OSError):
        return False


def _serving(server: ServerProcess, url: str, timeout: float) -> None:
    """Wait until ``url`` answers 2xx from ``server``; stop the server when it never does (or on interrupt)."""
    try:
        server.wait_until(lambda: _http_ok(url), timeout, f"GET {url}")
    except BaseException:
        server.stop()
        raise


def start_minio(workdir: Path, bucket: str = "icebergsync", ttl: int = SERVICE_TTL) -> S3Server:
    ensure_services("minio")
    binary = cache_dir() / "bin" / "minio"
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    port, console = free_port(), free_port()
    access, secret, region = "icebergsync", "icebergsync-secret", "us-east-1"
    env = {
        "MINIO_ROOT_USER": access,
        "MINIO_ROOT_PASSWORD": secret,
        "MINIO_REGION": region,
        "MINIO_BROWSER": "off",
        "MINIO_UPDATE": "off",
        "MINIO_CI_CD": "on",
        "GOMAXPROCS": "2",
    }
    log_path = workdir / "minio.log"
    server = ServerProcess(
        "minio",
        [
            str(binary),
            "server",
            "--quiet",
            "--address",
            f"{HOST}:{port}",
            "--console-address",
            f"{HOST}:{console}",
            str(data),
        ],
        log_path,
        env=env,
        cwd=workdir,
        ttl=ttl,
    )
    endpoint = f"http://{HOST}:{port}"
    s3 = S3Server(endpoint, access, secret, region, bucket, data, log_path, server)
    try:
        server.wait_until(lambda: _http_ok(f"{endpoint}/minio/health/ready"), 60, "/minio/health/ready")
        s3.create_bucket(bucket)
    except BaseException:
        server.stop()
        raise
    return s3


# --------------------------------------------------------------------------------------------
# Iceberg REST catalog


@dataclass
class RestCatalog:
    uri: str
    warehouse: str
    properties: dict[str, str]  # for pyiceberg.catalog.load_catalog(name, **properties)
    log_path: Path
    _server: ServerProcess = field(repr=False)

    def load(self, name: str = "rest") -> Any:
        from pyiceberg.catalog import load_catalog

        return load_catalog(name, **self.properties)

    def spark_catalog_conf(self, name: str) -> dict[str, str]:
        """Spark conf for an Iceberg catalog ``name`` on this server (needs "iceberg-spark" jars)."""
        prefix = f"spark.sql.catalog.{name}"
        conf = {
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.type": "rest",
            f"{prefix}.uri": self.uri,
        }
        if self.warehouse.startswith("s3://"):
            p = self.properties
            conf.update(
                {
                    f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
                    f"{prefix}.s3.endpoint": p["s3.endpoint"],
                    f"{prefix}.s3.path-style-access": "true",
                    f"{prefix}.s3.access-key-id": p["s3.access-key-id"],
                    f"{prefix}.s3.secret-access-key": p["s3.secret-access-key"],
                    f"{prefix}.client.region": p["s3.region"],
                }
            )
        return conf


def start_rest_catalog(workdir: Path, s3: S3Server | None = None, ttl: int = SERVICE_TTL) -> RestCatalog:
    ensure_services("rest")
    home = cache_dir() / "rest-catalog"
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    props = {
        "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "uri": f"jdbc:sqlite:{workdir / 'catalog.db'}",
        "jdbc.schema-version": "V1",
    }
    env: dict[str, str] = {}
    if s3 is None:
        wh_dir = workdir / "warehouse"
        wh_dir.mkdir(exist_ok=True)
        warehouse = f"file://{wh_dir}"
        client_props: dict[str, str] = {}
    else:
        warehouse = f"s3://{s3.bucket}/warehouse"
        props.update(
            {
                "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
                "s3.endpoint": s3.endpoint,
                "s3.path-style-access": "true",
                "s3.access-key-id": s3.access_key,
                "s3.secret-access-key": s3.secret_key,
                "client.region": s3.region,
            }
        )
        env = {
            "AWS_REGION": s3.region,
            "AWS_ACCESS_KEY_ID": s3.access_key,
            "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        }
        client_props = s3.fileio_properties
    props["warehouse"] = warehouse
    log_path = workdir / "rest-catalog.log"
    server = ServerProcess(
        "iceberg rest catalog",
        [
            JAVA,
            *SMALL_JVM,
            "-Xmx512m",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-cp",
            _classpath(home / "classes", home / "lib"),
            "org.apache.iceberg.rest.LoopbackRESTCatalogServer",
            HOST,
            str(port),
            *(f"{k}={v}" for k, v in props.items()),
        ],
        log_path,
        env=env,
        cwd=workdir,
        ttl=ttl,
    )
    uri = f"http://{HOST}:{port}"
    _serving(server, f"{uri}/v1/config", 120)
    properties = {"type": "rest", "uri": uri, "warehouse": warehouse, **client_props}
    return RestCatalog(uri, warehouse, properties, log_path, server)


# --------------------------------------------------------------------------------------------
# Project Nessie (an Iceberg REST catalog whose multi-table commit is atomic)


def java_21() -> str:
    """A Java of release 21 or later (Nessie 0.99 and Apicurio Registry 3.3 are built for 21): ``$JAVA_21``, else
    the newest JDK under /usr/lib/jvm (the machine image has a Temurin JDK beside OpenJDK 17), else ``java``."""
    if os.environ.get("JAVA_21"):
        return os.environ["JAVA_21"]
    found = []
    for release_file in Path("/usr/lib/jvm").glob("*/release"):  # JAVA_VERSION="25.0.3"
        for line in release_file.read_text(errors="replace").splitlines():
            if line.startswith("JAVA_VERSION="):
                major = line.split("=", 1)[1].strip('"').split(".")[0]
                java = release_file.parent / "bin" / "java"
                if major.isdigit() and int(major) >= 21 and java.exists():
                    found.append((int(major), str(java)))
    return max(found)[1] if found else JAVA


def start_nessie(workdir: Path, s3: S3Server, ttl: int = SERVICE_TTL) -> RestCatalog:
    """Nessie's server on 127.0.0.1: in-memory version store, Iceberg REST at ``<uri>/iceberg`` (branch main),
    warehouse ``s3://<bucket>/nessie`` on ``s3``. The client gets the same static MinIO credentials (no
    request signing)."""
    ensure_services("nessie")
    jar = cache_dir() / "nessie" / "nessie-quarkus-runner.jar"
    workdir.mkdir(parents=True, exist_ok=True)
    port, management = free_port(), free_port()
    warehouse = f"s3://{s3.bucket}/nessie"
    config = {
        "quarkus.http.host": HOST,
        "quarkus.http.port": str(port),
        "quarkus.management.host": HOST,
        "quarkus.management.port": str(management),
        "quarkus.otel.sdk.disabled": "true",
        "quarkus.log.console.level": "INFO",
        "nessie.version.store.type": "IN_MEMORY",
        "nessie.server.authentication.enabled": "false",
        "nessie.catalog.default-warehouse": "warehouse",
        "nessie.catalog.warehouses.warehouse.location": warehouse,
        "nessie.catalog.service.s3.default-options.endpoint": s3.endpoint,
        "nessie.catalog.service.s3.default-options.path-style-access": "true",
        "nessie.catalog.service.s3.default-options.region": s3.region,
        "nessie.catalog.service.s3.default-options.access-key": "urn:nessie-secret:quarkus:icebergsync-minio",
        "icebergsync-minio.name": s3.access_key,
        "icebergsync-minio.secret": s3.secret_key,
        "nessie.catalog.service.s3.default-options.request-signing-enabled": "false",
    }
    log_path = workdir / "nessie.log"
    server = ServerProcess(
        "nessie",
        [java_21(), *SMALL_JVM, "-Xmx768m", *(f"-D{k}={v}" for k, v in config.items()), "-jar", str(jar)],
        log_path,
        cwd=workdir,
        ttl=ttl,
    )
    uri = f"http://{HOST}:{port}/iceberg"
    _serving(server, f"{uri}/v1/config", 180)
    properties = {"type": "rest", "uri": uri, **s3.fileio_properties}
    return RestCatalog(uri, warehouse, properties, log_path, server)


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = start_kafka(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker
    finally:
        stop_kafka(broker)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    s3 = start_minio(tmp_path_factory.mktemp("minio"))
    try:
        yield s3
    finally:
        s3._server.stop()


@pytest.fixture(scope="session")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestCatalog]:
    cat = start_rest_catalog(tmp_path_factory.mktemp("rest-catalog"))
    try:
        yield cat
    finally:
        cat._server.stop()


@pytest.fixture(scope="session")
def rest_catalog_s3(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Iterator[RestCatalog]:
    cat = start_rest_catalog(tmp_path_factory.mktemp("rest-catalog-s3"), s3=s3_server)
    try:
        yield cat
    finally:
        cat._server.stop()


@pytest.fixture(scope="session")
def nessie_catalog(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Iterator[RestCatalog]:
    cat = start_nessie(tmp_path_factory.mktemp("nessie"), s3_server)
    try:
        yield cat
    finally:
        cat._server.stop()
