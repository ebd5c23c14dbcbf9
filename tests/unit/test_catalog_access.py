"""The operator's guarded catalog access, against real local sockets and HTTP servers: allow-listed
and unexpanded properties, endpoint allow-list, timeouts on a catalog that never answers, and
status messages without remote bodies."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest
from icebergsync_operator.catalog_access import (
    CatalogAccessError,
    describe_failure,
    endpoint_problem,
    open_guarded,
    operator_properties,
    redact,
)
from icebergsync_operator.kube import KubeApi
from icebergsync_operator.settings import OperatorSettings, parse_settings
from icebergsync_operator.table import observe_table

from icebergsync.catalog import catalog_properties, sql_connection_uri
from icebergsync.spec import Catalog, IcebergSync, parse_spec

REMOTE_SECRET = "remote-body-4f1c"  # what a tenant's server puts in its error bodies


@dataclass
class CatalogServer:
    """A local HTTP server speaking just enough of the REST catalog protocol, recording requests."""

    overrides: dict[str, str] = field(default_factory=dict)
    table_status: int = 500
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def uri(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> CatalogServer:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append((self.path, dict(self.headers)))
                if self.path.startswith("/v1/config"):
                    self._answer(200, {"defaults": {}, "overrides": outer.overrides})
                else:
                    self._answer(outer.table_status, {"error": {"message": f"boom {REMOTE_SECRET}",
                                                                "type": "RuntimeException", "code": 500}})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def catalog_server() -> Iterator[CatalogServer]:
    server = CatalogServer().start()
    yield server
    server.stop()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A socket that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(timeout=5)
    for connection in accepted:
        connection.close()
    listener.close()


class SecretsOf(KubeApi):
    """A KubeApi holding Secrets in memory (observe_table only reads Secrets)."""

    def __init__(self, secrets: dict[tuple[str, str], dict[str, str]]):
        self.secrets = secrets

    def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        return self.secrets[(namespace, name)]


def sync_for(catalog: dict[str, Any]) -> IcebergSync:
    return parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                       "metadata": {"name": "trips", "namespace": "team-a"},
                       "spec": {"source": {"generator": {}}, "table": {"name": "db.trips", "catalog": catalog}}})


def in_thread(call: Any, limit: float = 60.0) -> Any:
    """Run ``call`` in a thread; fail if it has not returned within ``limit`` seconds (it would hang a worker)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), "the catalog call did not return: it would block an operator worker"
    return result[0]


def test_a_catalog_that_accepts_and_never_answers_does_not_block(silent_server: str) -> None:
    settings = OperatorSettings(catalog_timeout=1.0)
    observation = in_thread(lambda: observe_table(SecretsOf({}), sync_for({"type": "rest", "uri": silent_server}),
                                                  settings))
    assert observation.sink is None
    assert observation.error == f"catalog at {silent_server} did not answer within 1s"


def test_error_bodies_of_the_tenants_server_never_reach_status(catalog_server: CatalogServer) -> None:
    observation = observe_table(SecretsOf({}), sync_for({"type": "rest", "uri": catalog_server.uri}),
                                OperatorSettings(catalog_timeout=5))
    assert observation.error == f"catalog at {catalog_server.uri} returned HTTP 500"
    assert REMOTE_SECRET not in observation.error


def test_env_references_are_never_expanded_nor_sent(catalog_server: CatalogServer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPERATOR_ONLY_TOKEN", "operator-credential-7731")
    sync = sync_for({"type": "rest", "uri": catalog_server.uri,
                     "properties": {"token": "${env:OPERATOR_ONLY_TOKEN}", "scope": "x-${env:OPERATOR_ONLY_TOKEN}"}})
    observe_table(SecretsOf({}), sync, OperatorSettings(catalog_timeout=5))
    assert catalog_server.requests, "the operator did talk to the catalog"
    sent = json.dumps(catalog_server.requests)
    assert "operator-credential-7731" not in sent
    properties = operator_properties(sync.spec.table.catalog, {}, 5, ())
    assert "token" not in properties and "scope" not in properties
    # The job expands them, from its own environment.
    assert catalog_properties(sync.spec.table.catalog, {})["token"] == "operator-credential-7731"


def test_only_allow_listed_properties_pass_from_spec_and_secret() -> None:
    catalog = Catalog(type="rest", uri="http://catalog:8181", warehouse="s3://lake",
                      properties={"py-io-impl": "os.system", "header.X-Forward": "evil", "scope": "catalog"})
    secret = {"token": "t0k", "py-catalog-impl": "builtins.exec", "s3.secret-access-key": "k",
              "ssl": "x", "s3.endpoint": "http://minio:9000"}
    properties = operator_properties(catalog, secret, 3, ())
    assert properties == {"uri": "http://catalog:8181", "warehouse": "s3://lake", "scope": "catalog", "token": "t0k",
                          "s3.secret-access-key": "k", "s3.endpoint": "http://minio:9000",
                          "s3.connect-timeout": "3", "s3.request-timeout": "3"}


def test_the_servers_config_cannot_widen_properties_or_move_the_endpoint(catalog_server: CatalogServer) -> None:
    catalog_server.overrides = {"py-io-impl": "os.system", "prefix": "wh"}
    opened = open_guarded(Catalog(type="rest", uri=catalog_server.uri), {}, 5, ())
    assert "py-io-impl" not in opened.properties
    assert opened.properties["prefix"] == "wh"

    catalog_server.overrides = {"uri": "http://169.254.169.254/latest"}
    with pytest.raises(CatalogAccessError, match=re.escape("169.254.169.254/latest is not among the endpoints")):
        open_guarded(Catalog(type="rest", uri=catalog_server.uri), {}, 5, (catalog_server.uri,))


def test_endpoints_outside_the_allow_list_are_refused_before_connecting(catalog_server: CatalogServer) -> None:
    allowed = ("https://catalog.internal/",)
    assert endpoint_problem("https://catalog.internal/api", allowed) is None
    assert endpoint_problem("http://anything", ()) is None
    assert "not among the endpoints" in str(endpoint_problem("https://catalog.internal.evil/", allowed))
    sync = sync_for({"type": "rest", "uri": catalog_server.uri})
    observation = observe_table(SecretsOf({}), sync, OperatorSettings(allowed_catalog_uris=allowed))
    assert observation.error is not None and "not among the endpoints" in observation.error
    assert catalog_server.requests == []
    secret_endpoint = sync_for({"type": "rest", "uri": "https://catalog.internal/", "secretRef": {"name": "c"}})
    observation = observe_table(SecretsOf({("team-a", "c"): {"oauth2-server-uri": "http://127.0.0.1:1/token"}}),
                                secret_endpoint, OperatorSettings(allowed_catalog_uris=allowed))
    assert observation.error == ("catalog oauth2-server-uri http://127.0.0.1:1/token is not among the endpoints this "
                                 "operator may connect to (--allowed-catalog-uris: https://catalog.internal/)")


def test_secrets_are_read_from_the_syncs_own_namespace(catalog_server: CatalogServer) -> None:
    sync = sync_for({"type": "rest", "uri": catalog_server.uri, "secretRef": {"name": "creds"}})
    api = SecretsOf({("team-a", "creds"): {"token": "team-a-token"}, ("other", "creds"): {"token": "other-token"}})
    observe_table(api, sync, OperatorSettings(catalog_timeout=5))
    authorizations = {headers.get("Authorization") for _, headers in catalog_server.requests}
    assert authorizations == {"Bearer team-a-token"}


def test_failure_descriptions_carry_no_remote_text_and_no_uri_credentials() -> None:
    uri = "postgresql://sync:hunter2@db.internal:5432/catalog"
    assert redact(uri) == "postgresql://db.internal:5432/catalog"
    message = describe_failure(RuntimeError(f"server said {REMOTE_SECRET}"), uri, 5)
    assert message == "reading the catalog at postgresql://db.internal:5432/catalog failed (RuntimeError)"


def test_a_sql_catalog_on_postgres_uses_the_psycopg2_driver_with_timeouts() -> None:
    assert sql_connection_uri("postgresql://u:p@db:5432/cat") == "postgresql+psycopg2://u:p@db:5432/cat"
    assert sql_connection_uri("postgres://db/cat") == "postgresql+psycopg2://db/cat"
    assert sql_connection_uri("sqlite:////tmp/c.db", connect_timeout=3) == "sqlite:////tmp/c.db"
    assert sql_connection_uri("postgresql://db/cat?sslmode=require", connect_timeout=2.5) == (
        "postgresql+psycopg2://db/cat?sslmode=require&connect_timeout=3&options=-c+statement_timeout%3D3000")


def test_a_local_sql_catalog_still_reads(tmp_path: Path) -> None:
    sync = sync_for({"uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": str(tmp_path / "warehouse")})
    catalog_properties(sync.spec.table.catalog)  # creates the warehouse directory, as the job does
    observation = observe_table(SecretsOf({}), sync, OperatorSettings())
    assert (observation.sink, observation.error) == (None, None)  # no table yet: not an error


def test_catalog_settings_from_flags_and_environment() -> None:
    settings, _ = parse_settings(["--catalog-timeout", "3s"],
                                 {"ICEBERGSYNC_ALLOWED_CATALOG_URIS": "https://a/, https://b/"})
    assert (settings.catalog_timeout, settings.allowed_catalog_uris) == (3.0, ("https://a/", "https://b/"))
    with pytest.raises(SystemExit):
        parse_settings(["--catalog-timeout", "0"], {})
    assert cast(OperatorSettings, parse_settings([], {})[0]).catalog_timeout == 10.0
