"""The operator's guarded catalog access, against real local sockets and HTTP servers: allow-listed
and unexpanded properties, endpoint allow-list, one deadline per read against a tarpit, a slow drip,
an OAuth2 token tarpit and a silent PostgreSQL, a size cap against a gzip bomb, refused redirects,
and status messages without remote bodies."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest
import requests
from icebergsync_operator.catalog_access import (
    CatalogAccessError,
    describe_failure,
    endpoint_problem,
    operator_properties,
    redact,
)
from icebergsync_operator.catalog_memory import MemoryBudget, TooLarge
from icebergsync_operator.catalog_scope import CatalogScope
from icebergsync_operator.deadline import Deadline
from icebergsync_operator.kube import KubeApi
from icebergsync_operator.metadata_file import read_metadata_file
from icebergsync_operator.read_bounds import ReadBounds
from icebergsync_operator.rest_read import GuardedRestCatalog
from icebergsync_operator.s3_read import object_endpoint, signed_headers
from icebergsync_operator.settings import OperatorSettings, parse_settings
from icebergsync_operator.sql_read import postgres_url
from icebergsync_operator.table import CatalogReach, observe_table
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from icebergsync.catalog import catalog_properties, ensure_table, open_catalog, sql_connection_uri
from icebergsync.spec import Catalog, IcebergSync, parse_spec
from tests.hostile_servers import Listener, drip, gzip_bomb, respond, silent_postgres

REMOTE_SECRET = "remote-body-4f1c"  # what a tenant's server puts in its error bodies
ANYWHERE = CatalogScope((), admin_declared=True, local_files=True)  #: a ClusterIcebergCatalog, outside a cluster


def reach(settings: OperatorSettings, scope: CatalogScope = ANYWHERE) -> CatalogReach:
    """How far a read may go: where ``scope`` allows (by default anywhere), with a memory budget of its own."""
    return CatalogReach(settings, scope, MemoryBudget(settings.catalog_read_memory, settings.max_catalog_reads))


def tenant(settings: OperatorSettings) -> CatalogReach:
    """A read for a catalog a tenant declared, under ``settings``' allow-list."""
    return reach(settings, settings.catalog_scope(admin_declared=False))


def bounds(deadline: Deadline, settings: OperatorSettings, scope: CatalogScope = ANYWHERE) -> ReadBounds:
    """One read's bounds outside ``observe_table``."""
    return ReadBounds(deadline, scope, reach(settings, scope).budget.share(settings.catalog_max_bytes))


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
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), "the catalog call did not return: it would block an operator worker"
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0]


def observe_within(catalog: dict[str, Any], settings: OperatorSettings | CatalogReach,
                   secrets: dict[str, str] | None = None, limit: float = 30.0) -> Any:
    """``observe_table`` for a sync on ``catalog`` (anywhere, unless a reach is given), failing the test unless it
    returns within ``limit`` s."""
    api = SecretsOf({("team-a", "creds"): secrets or {}})
    spec = {**catalog, "secretRef": {"name": "creds"}} if secrets else catalog
    how_far = settings if isinstance(settings, CatalogReach) else reach(settings)
    return in_thread(lambda: observe_table(api, sync_for(spec), how_far), limit)


# --- one deadline per read, against servers that never finish -----------------------------


def test_a_catalog_that_accepts_and_never_answers_does_not_block() -> None:
    with Listener() as tarpit:
        observation = observe_within({"type": "rest", "uri": tarpit.url}, OperatorSettings(catalog_timeout=1.0))
    assert observation.sink is None
    assert observation.error == f"catalog at {tarpit.url} did not answer within 1s"
    assert observation.timed_out


def test_a_slow_drip_that_resets_every_socket_timeout_still_ends_at_the_deadline() -> None:
    with Listener(drip) as dripping:
        observation = observe_within({"type": "rest", "uri": dripping.url}, OperatorSettings(catalog_timeout=2.0))
    assert observation.error == f"catalog at {dripping.url} did not answer within 2s"


def test_an_oauth2_token_exchange_at_a_tarpit_ends_at_the_deadline() -> None:
    """pyiceberg posts for the token while it builds its session: the bounded transport is already there."""
    with Listener() as tarpit:
        observation = observe_within({"type": "rest", "uri": tarpit.url}, OperatorSettings(catalog_timeout=1.0),
                                     secrets={"credential": "client:secret"})
        assert tarpit.connections == 1  # the token POST, which never got an answer
    assert observation.error == f"catalog at {tarpit.url} did not answer within 1s"


def test_an_oauth2_token_endpoint_elsewhere_at_a_tarpit_ends_at_the_deadline(catalog_server: CatalogServer) -> None:
    with Listener() as tarpit:
        observation = observe_within({"type": "rest", "uri": catalog_server.uri}, OperatorSettings(catalog_timeout=1.0),
                                     secrets={"credential": "client:secret", "oauth2-server-uri": f"{tarpit.url}/token"})
        assert tarpit.connections == 1
    assert observation.error == f"catalog at {catalog_server.uri} did not answer within 1s"
    assert catalog_server.requests == []  # the token comes first: nothing reached the catalog


def test_a_postgres_that_goes_silent_after_authenticating_ends_at_the_deadline() -> None:
    with Listener(silent_postgres) as postgres:
        uri = f"postgresql://sync:hunter2@127.0.0.1:{postgres.port}/catalog"
        observation = observe_within({"type": "sql", "uri": uri, "warehouse": "/nonexistent"},
                                     OperatorSettings(catalog_timeout=2.0))
        assert postgres.connections >= 1
    assert observation.error == f"catalog at postgresql://127.0.0.1:{postgres.port}/catalog did not answer within 2s"
    assert "hunter2" not in observation.error


# --- size cap, redirects, and the URI a client is given ------------------------------------


def test_a_gzip_bomb_stops_at_the_size_cap() -> None:
    bomb = respond("200 OK", {"Content-Type": "application/json", "Content-Encoding": "gzip"},
                   gzip_bomb(64 * 1024**2))
    with Listener(bomb) as server:
        observation = observe_within({"type": "rest", "uri": server.url},
                                     OperatorSettings(catalog_timeout=10.0, catalog_max_bytes=1024**2))
    assert observation.error == f"catalog at {server.url} sent a response larger than 1048576 bytes"


def test_a_plain_body_above_the_cap_is_refused_before_it_is_read() -> None:
    big = respond("200 OK", {"Content-Type": "application/json"}, b" " * (2 * 1024**2))
    with Listener(big) as server:
        observation = observe_within({"type": "rest", "uri": server.url},
                                     OperatorSettings(catalog_timeout=10.0, catalog_max_bytes=1024**2))
    assert observation.error == f"catalog at {server.url} sent a response larger than 1048576 bytes"


def test_a_redirect_to_another_host_is_refused_and_never_followed() -> None:
    with Listener() as elsewhere:
        redirect = respond("302 Found", {"Location": f"{elsewhere.url}/v1/config"})
        with Listener(redirect) as server:
            observation = observe_within({"type": "rest", "uri": server.url}, OperatorSettings(catalog_timeout=5.0))
        assert elsewhere.connections == 0
    assert observation.error == (f"catalog at {server.url} answered with a redirect (HTTP 302), which the operator "
                                 "does not follow")


def test_a_backslash_at_uri_never_reaches_the_host_an_http_client_would_pick() -> None:
    """``http://127.0.0.1:P\\@catalog.internal/`` is catalog.internal to one parser, 127.0.0.1 to another."""
    with Listener() as attacker:
        uri = f"http://127.0.0.1:{attacker.port}\\@catalog.internal/"
        for allow in ((), ("http://catalog.internal/",)):
            observation = observe_within({"type": "rest", "uri": uri}, OperatorSettings(allowed_catalog_uris=allow))
            assert observation.error == f"catalog uri {uri!r} contains a backslash"
        assert endpoint_problem(Catalog(type="rest", uri=uri)) == f"{uri!r} contains a backslash"
        userinfo = f"http://127.0.0.1:{attacker.port}@catalog.internal/"
        observation = observe_within({"type": "rest", "uri": userinfo}, OperatorSettings())
        assert observation.error is not None and "has user information" in observation.error
        assert attacker.connections == 0


def test_a_catalog_uri_is_connected_to_as_parsed(catalog_server: CatalogServer) -> None:
    """Upper case, a trailing dot, a default-less port and a trailing slash reach the same server."""
    port = catalog_server.uri.rsplit(":", 1)[1]
    observation = observe_within({"type": "rest", "uri": f"HTTP://127.0.0.1:{port}/"},
                                 tenant(OperatorSettings(allowed_catalog_uris=(catalog_server.uri,))))
    assert observation.error == f"catalog at HTTP://127.0.0.1:{port}/ returned HTTP 500"
    assert catalog_server.requests[0][0].startswith("/v1/config")


def test_error_bodies_of_the_tenants_server_never_reach_status(catalog_server: CatalogServer) -> None:
    observation = observe_table(SecretsOf({}), sync_for({"type": "rest", "uri": catalog_server.uri}), reach(OperatorSettings(catalog_timeout=5)))
    assert observation.error == f"catalog at {catalog_server.uri} returned HTTP 500"
    assert REMOTE_SECRET not in observation.error


def test_env_references_are_never_expanded_nor_sent(catalog_server: CatalogServer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPERATOR_ONLY_TOKEN", "operator-credential-7731")
    sync = sync_for({"type": "rest", "uri": catalog_server.uri,
                     "properties": {"token": "${env:OPERATOR_ONLY_TOKEN}", "scope": "x-${env:OPERATOR_ONLY_TOKEN}"}})
    observe_table(SecretsOf({}), sync, reach(OperatorSettings(catalog_timeout=5)))
    assert catalog_server.requests, "the operator did talk to the catalog"
    sent = json.dumps(catalog_server.requests)
    assert "operator-credential-7731" not in sent
    properties = operator_properties(sync.spec.table.catalog_or_default, {})
    assert "token" not in properties and "scope" not in properties
    # The job expands them, from its own environment.
    assert catalog_properties(sync.spec.table.catalog_or_default, {})["token"] == "operator-credential-7731"


def test_only_allow_listed_properties_pass_from_spec_and_secret() -> None:
    catalog = Catalog(type="rest", uri="http://catalog:8181", warehouse="s3://lake",
                      properties={"py-io-impl": "os.system", "header.X-Forward": "evil", "scope": "catalog"})
    secret = {"token": "t0k", "py-catalog-impl": "builtins.exec", "s3.secret-access-key": "k",
              "ssl": "x", "s3.endpoint": "http://minio:9000"}
    properties = operator_properties(catalog, secret)
    assert properties == {"warehouse": "s3://lake", "scope": "catalog", "token": "t0k",
                          "s3.secret-access-key": "k", "s3.endpoint": "http://minio:9000"}


def test_the_servers_config_cannot_widen_properties_or_move_the_endpoint(catalog_server: CatalogServer) -> None:
    catalog_server.overrides = {"py-io-impl": "os.system", "prefix": "wh"}
    with Deadline(5) as deadline:
        opened = GuardedRestCatalog("c", bounds(deadline, OperatorSettings()), uri=catalog_server.uri)
    assert "py-io-impl" not in opened.properties
    assert opened.properties["prefix"] == "wh"

    catalog_server.overrides = {"uri": "http://169.254.169.254/latest"}
    settings = OperatorSettings(allowed_catalog_uris=(catalog_server.uri,))
    with Deadline(5) as deadline, pytest.raises(
            CatalogAccessError, match=re.escape("catalog uri http://169.254.169.254/latest is not among the endpoints")):
        GuardedRestCatalog("c", bounds(deadline, settings, settings.catalog_scope(admin_declared=False)),
                           uri=catalog_server.uri)


def test_endpoints_outside_the_allow_list_are_refused_before_connecting(catalog_server: CatalogServer) -> None:
    settings = OperatorSettings(allowed_catalog_uris=("https://catalog.internal/",))
    scope = settings.catalog_scope(admin_declared=False)
    assert scope.refusal(Catalog(type="rest", uri="https://catalog.internal/api")) is None
    assert "not among the endpoints" in str(scope.refusal(Catalog(type="rest", uri="https://catalog.internal.evil/")))
    sync = sync_for({"type": "rest", "uri": catalog_server.uri})
    observation = observe_table(SecretsOf({}), sync, tenant(settings))
    assert observation.error is not None and "not among the endpoints" in observation.error
    assert catalog_server.requests == []
    secret_endpoint = sync_for({"type": "rest", "uri": "https://catalog.internal/", "secretRef": {"name": "c"}})
    observation = observe_table(SecretsOf({("team-a", "c"): {"oauth2-server-uri": "http://127.0.0.1:1/token"}}),
                                secret_endpoint, tenant(settings))
    assert observation.error == ("catalog oauth2-server-uri http://127.0.0.1:1/token is not among the endpoints this "
                                 "operator may connect to (--allowed-catalog-uris: https://catalog.internal/); the "
                                 "cluster admin must list it in operator.allowedCatalogUris (--allowed-catalog-uris)")


def test_secrets_are_read_from_the_syncs_own_namespace(catalog_server: CatalogServer) -> None:
    sync = sync_for({"type": "rest", "uri": catalog_server.uri, "secretRef": {"name": "creds"}})
    api = SecretsOf({("team-a", "creds"): {"token": "team-a-token"}, ("other", "creds"): {"token": "other-token"}})
    observe_table(api, sync, reach(OperatorSettings(catalog_timeout=5)))
    authorizations = {headers.get("Authorization") for _, headers in catalog_server.requests}
    assert authorizations == {"Bearer team-a-token"}


def test_failure_descriptions_carry_no_remote_text_and_no_uri_credentials() -> None:
    uri = "postgresql://sync:hunter2@db.internal:5432/catalog"
    assert redact(uri) == "postgresql://db.internal:5432/catalog"
    message = describe_failure(RuntimeError(f"server said {REMOTE_SECRET}"), uri, 5)
    assert message == "reading the catalog at postgresql://db.internal:5432/catalog failed (RuntimeError)"


def test_a_sql_catalog_on_postgres_uses_the_psycopg2_driver() -> None:
    assert sql_connection_uri("postgresql://u:p@db:5432/cat") == "postgresql+psycopg2://u:p@db:5432/cat"
    assert sql_connection_uri("postgres://db/cat") == "postgresql+psycopg2://db/cat"
    assert sql_connection_uri("sqlite:////tmp/c.db") == "sqlite:////tmp/c.db"


def test_the_operator_connects_to_postgres_with_a_url_built_from_the_parse_and_its_time_limits() -> None:
    settings = OperatorSettings(allowed_catalog_uris=("postgresql://db.internal:6543",))
    with Deadline(2.5) as deadline:
        url = postgres_url("postgresql://u:p%40ss@DB.internal:6543/cat?sslmode=require",
                           bounds(deadline, settings, settings.catalog_scope(admin_declared=False)))
    assert (url.drivername, url.username, url.password, url.host, url.port, url.database) == (
        "postgresql+psycopg2", "u", "p@ss", "db.internal", 6543, "cat")
    assert dict(url.query) == {"sslmode": "require", "connect_timeout": "3", "options": "-c statement_timeout=3000",
                               "keepalives": "1", "keepalives_idle": "1", "keepalives_interval": "1",
                               "keepalives_count": "3", "tcp_user_timeout": "3000"}
    with Deadline(2) as deadline, pytest.raises(CatalogAccessError, match="is not among the endpoints"):
        postgres_url("postgresql://u:p@db.internal/cat",
                     bounds(deadline, settings, CatalogScope(("postgresql://other.internal",), False, False)))


def test_a_local_sql_catalog_still_reads(tmp_path: Path) -> None:
    sync = sync_for({"uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": str(tmp_path / "warehouse")})
    catalog_properties(sync.spec.table.catalog_or_default)  # creates the warehouse directory, as the job does
    observation = observe_table(SecretsOf({}), sync, reach(OperatorSettings()))
    assert (observation.sink, observation.error) == (None, None)  # no table yet: not an error

    schema = Schema(NestedField(1, "id", LongType(), required=False))
    table = ensure_table(open_catalog(sync.spec.table.catalog_or_default), "db.trips", schema, [], {})
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    observation = observe_table(SecretsOf({}), sync, reach(OperatorSettings()))
    assert observation.error is None and observation.sink is not None
    assert (observation.sink.total_records, observation.sink.snapshot_id) == (3, None)  # not a commit of this sink


def test_a_metadata_file_must_be_a_regular_file_and_fit_the_cap(tmp_path: Path) -> None:
    fifo = tmp_path / "v1.metadata.json"
    os.mkfifo(fifo)
    bomb = tmp_path / "v2.gz.metadata.json"
    bomb.write_bytes(gzip_bomb(16 * 1024**2))
    settings = OperatorSettings(catalog_max_bytes=1024**2)
    with Deadline(5) as deadline, requests.Session() as unused:
        read = bounds(deadline, settings)
        with pytest.raises(CatalogAccessError, match="is not a regular file"):
            in_thread(lambda: read_metadata_file(str(fifo), {}, unused, read))
        with pytest.raises(TooLarge, match="larger than 1048576 bytes"):
            read_metadata_file(f"file://{bomb}", {}, unused, read)
        with pytest.raises(CatalogAccessError, match="hdfs:// locations is not read"):
            read_metadata_file("hdfs://namenode/t/v1.metadata.json", {}, unused, read)


def test_an_s3_object_is_read_path_style_at_the_parsed_endpoint_and_signed_only_with_the_tenants_keys() -> None:
    server, path = object_endpoint("s3://lake/wh/db/t/metadata/00001 x.metadata.json",
                                   {"s3.endpoint": "http://MinIO.internal:9000/"})
    assert (server.url, path) == ("http://minio.internal:9000", "/lake/wh/db/t/metadata/00001%20x.metadata.json")
    assert object_endpoint("s3a://lake/k", {"s3.region": "eu-west-1"})[0].url == "https://s3.eu-west-1.amazonaws.com"
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert signed_headers(server, path, {}, now) == {}  # no keys of the tenant's: anonymous
    signed = signed_headers(server, path, {"s3.access-key-id": "AKID", "s3.secret-access-key": "s",
                                           "s3.session-token": "t", "s3.region": "eu-west-1"}, now)
    assert signed["x-amz-date"] == "20260501T120000Z" and signed["x-amz-security-token"] == "t"
    assert signed["Authorization"].startswith(
        "AWS4-HMAC-SHA256 Credential=AKID/20260501/eu-west-1/s3/aws4_request, "
        "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token, Signature=")


def test_catalog_settings_from_flags_and_environment() -> None:
    settings, _ = parse_settings(["--catalog-timeout", "3s", "--catalog-max-bytes", "8Mi",
                                  "--catalog-read-memory", "320Mi"],
                                 {"ICEBERGSYNC_ALLOWED_CATALOG_URIS": "https://a/, https://b/",
                                  "ICEBERGSYNC_MAX_STUCK_CATALOG_READS": "2", "ICEBERGSYNC_RECONCILE_STUCK_AFTER": "2m"})
    assert (settings.catalog_timeout, settings.catalog_max_bytes, settings.allowed_catalog_uris) == (
        3.0, 8 * 1024**2, ("https://a/", "https://b/"))
    assert (settings.max_stuck_catalog_reads, settings.reconcile_stuck_after) == (2, 120.0)
    for refused in (["--catalog-timeout", "0"], ["--catalog-timeout", "30s", "--reconcile-stuck-after", "119s"],
                    ["--max-stuck-catalog-reads", "0"], ["--allowed-catalog-uris", "http://a\\@b/"],
                    ["--catalog-max-bytes", "8Mi"], ["--max-namespace-catalog-reads", "17"]):
        with pytest.raises(SystemExit):
            parse_settings(refused, {})
    defaults = cast(OperatorSettings, parse_settings([], {})[0])
    assert (defaults.catalog_timeout, defaults.catalog_max_bytes) == (10.0, 4 * 1024**2)
