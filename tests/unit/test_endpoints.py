"""Endpoint URIs parsed once and strictly, and the allow-list matched on the parse (pure)."""

from __future__ import annotations

import pytest
from icebergsync_operator.endpoints import (
    Endpoint,
    EndpointError,
    allowed,
    parse_allow_list,
    parse_endpoint,
    parse_sql_uri,
    redact,
)

ALLOW = parse_allow_list(["https://catalog.internal/api", "http://127.0.0.1:8181", "http://[::1]:8181/"])


@pytest.mark.parametrize(("uri", "why"), [
    ("http://127.0.0.1:8181\\@catalog.internal/", "contains a backslash"),
    ("http://catalog.internal\\", "contains a backslash"),
    ("http://attacker@catalog.internal/", "has user information"),
    ("http://127.0.0.1:8181@catalog.internal/", "has user information"),
    ("http://u:p@catalog.internal/", "has user information"),
    ("http://catalog.internal/\tapi", "whitespace, control or non-ASCII"),
    ("http://catalog.internal/api\n", "whitespace, control or non-ASCII"),
    ("http://catalog.internal /", "whitespace, control or non-ASCII"),
    ("http://catal\u043eg.internal/", "whitespace, control or non-ASCII"),  # a Cyrillic o
    ("ftp://catalog.internal/", "has scheme 'ftp'"),
    ("file:///etc/passwd", "has scheme 'file'"),
    ("catalog.internal:8181", "is not an absolute URI"),
    ("http:/catalog.internal", "is not an absolute URI"),
    ("http://catalog.internal/api?x=1", "has a query string"),
    ("http://catalog.internal/#x", "has a fragment"),
    ("http://catalog%2Einternal/", "percent-encoded host"),
    ("http://[fe80::1%25eth0]:8181/", "percent-encoded host"),
    ("http://[::1/", "unterminated IPv6 literal"),
    ("http://[::g]/", "invalid IPv6 literal"),
    ("http://2130706433/", "numeric host that is not a dotted-quad"),
    ("http://127.1/", "numeric host that is not a dotted-quad"),
    ("http://0x7f.0.0.1/", "numeric host that is not a dotted-quad"),
    ("http://127.000.000.001/", "numeric host that is not a dotted-quad"),
    ("http://catalog_internal/", "invalid host name"),
    ("http://catalog..internal/", "invalid host name"),
    ("http://-catalog.internal/", "invalid host name"),
    ("http://:8181/", "has no host"),
    ("http://catalog.internal:0/", "invalid port '0'"),
    ("http://catalog.internal:65536/", "invalid port '65536'"),
    ("http://catalog.internal:+80/", "invalid port '+80'"),
    ("http://catalog.internal:/", "invalid port ''"),
    ("http://catalog.internal/api/../admin", "'.' or '..' path segments"),
    ("http://catalog.internal/api/%2e%2e/admin", "percent-escapes"),
    ("http://catalog.internal/api%2Fadmin", "percent-escapes"),
    ("http://catalog.internal/api%5cadmin", "percent-escapes"),
])
def test_ambiguous_uris_are_refused_naming_the_uri_and_why(uri: str, why: str) -> None:
    with pytest.raises(EndpointError) as refused:
        parse_endpoint(uri)
    assert why in str(refused.value)
    assert repr(uri) in str(refused.value)


@pytest.mark.parametrize(("uri", "parsed", "url"), [
    ("http://catalog.internal:8181/api/", Endpoint("http", "catalog.internal", 8181, "/api"),
     "http://catalog.internal:8181/api"),
    ("HTTPS://Catalog.Internal./", Endpoint("https", "catalog.internal", 443), "https://catalog.internal"),
    ("http://catalog.internal:80", Endpoint("http", "catalog.internal", 80), "http://catalog.internal"),
    ("https://catalog.internal:8443", Endpoint("https", "catalog.internal", 8443), "https://catalog.internal:8443"),
    ("http://127.0.0.1:8181", Endpoint("http", "127.0.0.1", 8181), "http://127.0.0.1:8181"),
    ("http://[0:0::1]:8181/v1", Endpoint("http", "::1", 8181, "/v1"), "http://[::1]:8181/v1"),
    ("http://[::FFFF:127.0.0.1]/", Endpoint("http", "::ffff:7f00:1", 80), "http://[::ffff:7f00:1]"),
    ("http://catalog.internal/ns%1Fdb/a:b@c", Endpoint("http", "catalog.internal", 80, "/ns%1Fdb/a:b@c"),
     "http://catalog.internal/ns%1Fdb/a:b@c"),
])
def test_a_uri_is_parsed_into_canonical_parts_and_url(uri: str, parsed: Endpoint, url: str) -> None:
    assert parse_endpoint(uri) == parsed
    assert parsed.url == url
    assert parse_endpoint(parsed.url) == parsed  # the canonical URL parses back to the same endpoint


@pytest.mark.parametrize(("uri", "ok"), [
    ("https://catalog.internal/api", True),
    ("https://catalog.internal/api/v1/config", True),
    ("https://CATALOG.internal./api/", True),
    ("https://catalog.internal:443/api", True),
    ("https://catalog.internal/apiv2", False),  # a prefix of the string, not of the path's segments
    ("https://catalog.internal/", False),
    ("http://catalog.internal/api", False),  # another scheme
    ("https://catalog.internal:8443/api", False),  # another port
    ("https://catalog.internal.evil/api", False),
    ("https://evil.catalog.internal/api", False),
    ("http://127.0.0.1:8181/anything", True),
    ("http://127.0.0.1:8182/", False),
    ("http://localhost:8181/", False),  # names are not resolved: only what the admin wrote matches
    ("http://[::1]:8181/v1", True),
    ("http://[::ffff:127.0.0.1]:8181/", False),
])
def test_the_allow_list_matches_scheme_host_port_exactly_and_paths_on_segments(uri: str, ok: bool) -> None:
    assert allowed(parse_endpoint(uri), ALLOW) is ok


def test_an_empty_allow_list_allows_any_parsed_endpoint_and_bad_entries_are_refused() -> None:
    assert allowed(parse_endpoint("http://anything.example:1/"), ())
    with pytest.raises(EndpointError, match="contains a backslash"):
        parse_allow_list(["http://127.0.0.1\\@catalog.internal/"])


def test_a_postgres_uri_keeps_its_credentials_apart_and_refuses_options_that_move_the_connection() -> None:
    parsed = parse_sql_uri("postgresql://sync:p%40ss%3Aw@DB.internal:6543/catalog?sslmode=require")
    assert parsed.endpoint == Endpoint("postgresql", "db.internal", 6543, "/catalog")
    assert (parsed.username, parsed.password, parsed.database, parsed.options) == (
        "sync", "p@ss:w", "catalog", {"sslmode": "require"})
    assert parse_sql_uri("postgres://db.internal/c").endpoint == Endpoint("postgresql", "db.internal", 5432, "/c")
    assert allowed(parsed.endpoint, parse_allow_list(["postgresql://db.internal:6543"]))
    assert not allowed(parsed.endpoint, parse_allow_list(["postgresql://db.internal"]))
    for uri, why in [
        ("postgresql://sync:p@ss@10.0.0.1/catalog", "more than one '@'"),
        ("postgresql://db.internal/c?host=10.0.0.1", "has connection options host"),
        ("postgresql://db.internal/c?hostaddr=10.0.0.1&port=1", "has connection options hostaddr, port"),
        ("postgresql://a,b/c", "names several hosts"),
        ("postgresql:///c?host=/var/run/postgresql", "has no host"),
        ("postgresql://sync:secret@db\\.internal/c", "contains a backslash"),
    ]:
        with pytest.raises(EndpointError) as refused:
            parse_sql_uri(uri)
        assert why in str(refused.value) and "secret" not in str(refused.value)


def test_redact_drops_user_information() -> None:
    assert redact("postgresql://sync:hunter2@db.internal:5432/catalog") == "postgresql://db.internal:5432/catalog"
    assert redact("http://catalog.internal/a@b") == "http://catalog.internal/a@b"
