"""A real Schema Registry for the tests: Apicurio Registry 3.3 on 127.0.0.1, its Confluent-compatible API.

The server is the release's Quarkus distribution from Maven Central, unpacked by ``scripts/infra/services.sh
registry``; it needs Java 21 or later (:func:`tests.infra.services.java_21`). Its storage is an H2 database in a
file of the server's work directory, so a restart (:meth:`SchemaRegistry.outage`) keeps every subject, version
and schema id. Like the suite's other servers it listens on free ports, logs to ``registry.log``, lives at most
its ``ttl`` and dies with pytest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.schema_registry import SchemaRegistryClient

from tests.infra.services import (
    HOST,
    SERVICE_TTL,
    SMALL_JVM,
    ServerProcess,
    _serving,
    cache_dir,
    ensure_services,
    free_port,
    java_21,
)

CCOMPAT_PATH = "/apis/ccompat/v7"  #: the Confluent Schema Registry API of Apicurio Registry
START_TIMEOUT = 180.0  #: seconds the server may take to answer (about 8 s on the 2-core test machine)


@dataclass
class SchemaRegistry:
    """A running Apicurio Registry: ``url`` is its Confluent-compatible API, for ``SchemaRegistryClient``."""

    workdir: Path
    port: int
    management_port: int
    ttl: int
    _server: ServerProcess = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}{CCOMPAT_PATH}"

    @property
    def log_path(self) -> Path:
        return self._server.log_path

    def client(self, conf: Mapping[str, object] | None = None) -> SchemaRegistryClient:
        """A new confluent-kafka client of this registry (its own schema caches), with extra ``conf``."""
        return SchemaRegistryClient({"url": self.url, "timeout": 10, **(conf or {})})  # never an endless wait

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The registry down (stopped) for the ``with`` block, then started again on the same ports and database:
        every schema and id is still there when the block has ended."""
        self.stop()
        try:
            yield
        finally:
            self._server = _registry_server(self.workdir, self.port, self.management_port, self.ttl)

    def stop(self) -> None:
        self._server.stop()


def start_schema_registry(workdir: Path, ttl: int = SERVICE_TTL) -> SchemaRegistry:
    """Apicurio Registry on free ports of 127.0.0.1, its database under ``workdir``; returns once its
    Confluent-compatible API answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    port, management_port = free_port(), free_port()
    server = _registry_server(workdir, port, management_port, ttl)
    return SchemaRegistry(workdir, port, management_port, ttl, server)


def _registry_server(workdir: Path, port: int, management_port: int, ttl: int) -> ServerProcess:
    """The server of ``workdir`` on ``port`` (and its health and metrics on ``management_port``), serving."""
    ensure_services("registry")
    config = {
        "quarkus.http.host": HOST,
        "quarkus.http.port": str(port),
        "quarkus.management.host": HOST,
        "quarkus.management.port": str(management_port),
        "apicurio.datasource.url": f"jdbc:h2:file:{workdir / 'h2' / 'registry'}",
    }
    server = ServerProcess(
        "schema registry",
        [java_21(), *SMALL_JVM, "-Xmx512m", *(f"-D{k}={v}" for k, v in config.items()),
         "-jar", str(cache_dir() / "apicurio-registry" / "quarkus-run.jar")],
        workdir / "registry.log",
        cwd=workdir,
        ttl=ttl,
    )
    _serving(server, f"http://{HOST}:{port}{CCOMPAT_PATH}/subjects", START_TIMEOUT)
    return server
