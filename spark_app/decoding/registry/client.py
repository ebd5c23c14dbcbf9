"""The Schema Registry as the tasks see it: a schema by its id, fetched once per process, through confluent-kafka's
``SchemaRegistryClient`` with bounded retries.

A schema id the registry does not know is an answer (None: the record is a dead letter); a registry that does not
answer usefully within the budget is :class:`~icebergsync.errors.SchemaRegistryUnreachableError` (the sync stops with
its one line, exit 8), never a stream of dead letters.
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from icebergsync.errors import SchemaRegistryUnreachableError
from icebergsync.transient.calls import last_line
from icebergsync.transient.http import jittered_backoff

log = logging.getLogger("icebergsync.job")

SECRET_PREFIX = "schema.registry."  # the kafka secretRef's keys for the registry (credentials, TLS files)
_CLIENT_DEFAULTS = {"max.retries": "3", "retries.wait.ms": "500", "retries.max.wait.ms": "4000", "timeout": "10"}
_NOT_FOUND = 404


@dataclass(frozen=True)
class RegisteredSchema:
    """A registered schema: its type (``AVRO``, ``PROTOBUF``, ``JSON``) and its text."""

    schema_type: str
    text: str


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is and how to reach it (picklable: the tasks build their own client)."""

    url: str
    conf: tuple[tuple[str, str], ...] = ()
    budget_seconds: float = 60.0

    @staticmethod
    def of(url: str, options: Mapping[str, str], secret: Mapping[str, str], budget_seconds: float) -> RegistrySettings:
        """The settings from ``schemaRegistry`` (url, options, retry budget) and the kafka secret's
        ``schema.registry.`` keys."""
        conf = {**_CLIENT_DEFAULTS, **options,
                **{key[len(SECRET_PREFIX):]: value for key, value in secret.items() if key.startswith(SECRET_PREFIX)}}
        return RegistrySettings(url.rstrip("/"), tuple(sorted(conf.items())), budget_seconds)


_schemas: dict[tuple[RegistrySettings, int], RegisteredSchema | None] = {}
_clients: dict[RegistrySettings, Any] = {}
_lock = threading.Lock()


def registered_schema(settings: RegistrySettings, schema_id: int, sleep: Callable[[float], None] = time.sleep,
                      serialized: bool = False) -> RegisteredSchema | None:
    """The schema registered as ``schema_id`` (None: the registry does not know it), cached for the process.
    ``serialized``: a Protobuf schema registered as ``.proto`` text is asked for again in Confluent's serialized
    form (a base64 ``FileDescriptorProto``); a registry without that form leaves the text."""
    key = (settings, schema_id)
    if key in _schemas:
        return _schemas[key]
    found = _fetch(settings, schema_id, sleep)
    if serialized and found is not None and found.schema_type.upper() == "PROTOBUF" and not _base64(found.text):
        found = _serialized(settings, schema_id) or found
    with _lock:
        _schemas[key] = found
    return found


def _base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _serialized(settings: RegistrySettings, schema_id: int) -> RegisteredSchema | None:
    """Confluent's serialized form of a Protobuf schema, or None when the registry does not give it."""
    try:
        schema = _client(settings).get_schema(schema_id, fmt="serialized")
    except Exception as error:  # Apicurio answers 500; any other registry may lack the form
        log.info("schema registry %s: schema id %d has no serialized form (%s)", settings.url, schema_id,
                 last_line(error))
        return None
    return RegisteredSchema(str(schema.schema_type or "PROTOBUF"), schema.schema_str) if _base64(
        schema.schema_str) else None


def _client(settings: RegistrySettings) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    with _lock:
        if settings not in _clients:
            conf: dict[str, Any] = {"url": settings.url, **dict(settings.conf)}
            for number in ("max.retries", "retries.wait.ms", "retries.max.wait.ms", "timeout"):
                if number in conf:
                    conf[number] = int(conf[number])
            _clients[settings] = SchemaRegistryClient(conf)
        return _clients[settings]


def _fetch(settings: RegistrySettings, schema_id: int, sleep: Callable[[float], None]) -> RegisteredSchema | None:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    deadline = time.monotonic() + settings.budget_seconds
    attempt = 0
    while True:
        try:
            schema = _client(settings).get_schema(schema_id)
            return RegisteredSchema(str(schema.schema_type or "AVRO"), schema.schema_str)
        except SchemaRegistryError as error:
            if error.http_status_code == _NOT_FOUND:
                return None
            failure: BaseException = error
        except Exception as error:  # the HTTP client's connection errors and timeouts
            failure = error
        delay = jittered_backoff(attempt, 1.0, 10.0)
        attempt += 1
        if time.monotonic() + delay > deadline:
            raise SchemaRegistryUnreachableError(
                f"schema registry {settings.url}: schema id {schema_id} could not be fetched "
                f"({last_line(failure)})") from failure
        log.warning("schema registry %s: schema id %d: %s; attempt %d again in %.1fs", settings.url, schema_id,
                    last_line(failure), attempt + 1, delay)
        sleep(delay)
