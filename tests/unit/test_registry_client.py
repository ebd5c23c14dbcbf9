"""The tasks' Schema Registry access over real HTTP (a local server answering as a registry under faults): a schema
fetched once per process, an unknown id an answer, a registry that fails for a while ridden out, one that fails past
the budget a stop naming it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from icebergsync.errors import SchemaRegistryUnreachableError
from spark_app.decoding.registry import client
from spark_app.decoding.registry.client import RegisteredSchema, RegistrySettings, registered_schema

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]})


class _Registry(BaseHTTPRequestHandler):
    failures = 0  # answers of 503 still to give
    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        if type(self).failures > 0:
            type(self).failures -= 1
            self._answer(503, {"error_code": 50301, "message": "unavailable"})
        elif self.path.startswith("/schemas/ids/7"):
            self._answer(200, {"schema": SCHEMA, "schemaType": "AVRO"})
        else:
            self._answer(404, {"error_code": 40403, "message": "Schema not found"})

    def _answer(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[RegistrySettings]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Registry.failures, _Registry.requests = 0, []
    client._schemas.clear()
    try:
        yield RegistrySettings.of(f"http://127.0.0.1:{server.server_address[1]}/", {"max.retries": "0"}, {}, 30.0)
    finally:
        server.shutdown()
        server.server_close()


def test_a_schema_is_fetched_once_and_an_unknown_id_is_an_answer(registry: RegistrySettings) -> None:
    assert registered_schema(registry, 7) == RegisteredSchema("AVRO", SCHEMA)
    assert registered_schema(registry, 7) == RegisteredSchema("AVRO", SCHEMA)
    assert registered_schema(registry, 8) is None
    assert [path.split("?")[0] for path in _Registry.requests] == ["/schemas/ids/7", "/schemas/ids/8"]


def test_a_registry_failing_for_a_while_is_ridden_out(registry: RegistrySettings) -> None:
    _Registry.failures = 3
    waits: list[float] = []
    assert registered_schema(registry, 7, sleep=waits.append) == RegisteredSchema("AVRO", SCHEMA)
    assert len(waits) == 3 and all(wait > 0 for wait in waits)


def test_a_registry_failing_past_the_budget_stops_naming_it(registry: RegistrySettings) -> None:
    _Registry.failures = 10**6
    budget = RegistrySettings(registry.url, registry.conf, budget_seconds=0.0)
    with pytest.raises(SchemaRegistryUnreachableError) as caught:
        registered_schema(budget, 7, sleep=lambda _: None)
    assert str(caught.value).startswith(f"schema registry {registry.url}: schema id 7 could not be fetched")


def test_credentials_come_from_the_kafka_secrets_registry_keys() -> None:
    settings = RegistrySettings.of("http://r:8081/", {"timeout": "5"},
                                   {"schema.registry.basic.auth.user.info": "u:p", "sasl.password": "kafka"}, 10.0)
    conf = dict(settings.conf)
    assert settings.url == "http://r:8081" and conf["basic.auth.user.info"] == "u:p" and conf["timeout"] == "5"
    assert "sasl.password" not in conf
