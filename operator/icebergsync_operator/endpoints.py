"""Endpoint URIs parsed once, strictly: the value the allow-list checks is the value the operator connects to.

A tenant writes the URIs of its catalog, OAuth2 token and S3 endpoints. Two URL parsers that
disagree (``http://127.0.0.1:9\\@catalog.internal/`` is host ``catalog.internal`` to one and
``127.0.0.1`` to another) would let a URI pass the allow-list and reach another host, so the
operator never hands a tenant's string to a client: ``parse_endpoint`` refuses whatever two parsers
could read differently (backslashes, userinfo, whitespace and control characters, non-ASCII,
percent-encoded or numeric-but-not-canonical hosts, dot segments, queries, fragments) and returns an
``Endpoint`` whose canonical ``url`` is what the HTTP client is given and whose scheme, host and
port are what it connects to. Allow-list entries are parsed the same way and matched structurally:
scheme, host and port exactly, the path as a prefix on segment boundaries.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote

HTTP_SCHEMES = {"http": 80, "https": 443}
SQL_SCHEMES = {"postgresql": 5432, "postgres": 5432, "postgresql+psycopg2": 5432}

_URI = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)(?P<path>[^?#]*)"
                  r"(?:\?(?P<query>[^#]*))?(?:#(?P<fragment>.*))?")
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_PATH_SEGMENT = re.compile(r"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*")
_ENCODED_SEPARATORS = re.compile(r"%(?:2[Ff]|5[Cc]|2[Ee])")


class EndpointError(ValueError):
    """A URI the operator will not connect to; the message names the value and why."""


@dataclass(frozen=True)
class Endpoint:
    """A network endpoint: lower-case scheme and host (IP literals canonical), explicit port, path."""

    scheme: str
    host: str
    port: int
    path: str = ""  #: no trailing slash; "" is the root

    @property
    def netloc(self) -> str:
        """Host (IPv6 in brackets) and the port unless it is the scheme's default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = HTTP_SCHEMES.get(self.scheme, SQL_SCHEMES.get(self.scheme))
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """The canonical URL, built from the parsed parts: the only form a client is given."""
        return f"{self.scheme}://{self.netloc}{self.path}"

    def within(self, allowed: Endpoint) -> bool:
        """Same scheme, host and port, and the path at or below ``allowed``'s on a segment boundary."""
        return ((self.scheme, self.host, self.port) == (allowed.scheme, allowed.host, allowed.port)
                and (self.path == allowed.path or self.path.startswith(allowed.path + "/")))


def _refuse(uri: str, why: str) -> EndpointError:
    return EndpointError(f"{uri!r} {why}")


def _host(uri: str, text: str) -> str:
    """The canonical host: an IP literal in its standard form, or a lower-case DNS name."""
    if text.startswith("["):
        if not text.endswith("]"):
            raise _refuse(uri, "has an unterminated IPv6 literal")
        try:
            return ipaddress.IPv6Address(text[1:-1]).compressed
        except ValueError:
            raise _refuse(uri, "has an invalid IPv6 literal (zone ids are not accepted)") from None
    name = text.lower().removesuffix(".")
    labels = name.split(".")
    if labels[-1].isdigit() or labels[-1].startswith("0x"):
        try:
            return str(ipaddress.IPv4Address(name))  # refuses leading zeros, which some resolvers read as octal
        except ValueError:
            raise _refuse(uri, "has a numeric host that is not a dotted-quad IPv4 address") from None
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise _refuse(uri, "has an invalid host name (letters, digits, '-' and '.' only)")
    return name


def _port(uri: str, text: str | None, default: int) -> int:
    if text is None:
        return default
    if not text.isdigit() or len(text) > 5 or not 0 < int(text) < 65536:
        raise _refuse(uri, f"has an invalid port {text!r}")
    return int(text)


def _path(uri: str, path: str) -> str:
    segments = path.split("/")[1:] if path else []
    for segment in segments:
        if not _PATH_SEGMENT.fullmatch(segment) or _ENCODED_SEPARATORS.search(segment):
            raise _refuse(uri, "has a path with characters or percent-escapes (%2F, %5C, %2E) the operator refuses")
        if segment in (".", ".."):
            raise _refuse(uri, "has '.' or '..' path segments")
    return path.rstrip("/")


def _split(uri: str, schemes: dict[str, int], shown: str) -> tuple[str, str, str, str | None]:
    """Scheme, authority, path and query of a URI made only of printable ASCII without backslashes.

    ``shown`` is how error messages name the URI (a SQL URI's without its credentials).
    """
    if any(not "!" <= char <= "~" for char in uri):
        raise _refuse(shown, "contains whitespace, control or non-ASCII characters")
    if "\\" in uri:
        raise _refuse(shown, "contains a backslash")
    match = _URI.fullmatch(uri)
    if match is None:
        raise _refuse(shown, "is not an absolute URI (scheme://host[:port][/path])")
    scheme = match["scheme"].lower()
    if scheme not in schemes:
        raise _refuse(shown, f"has scheme {scheme!r}; expected {' or '.join(sorted(schemes))}")
    if match["fragment"] is not None:
        raise _refuse(shown, "has a fragment")
    return scheme, match["authority"], match["path"], match["query"]


def _host_and_port(uri: str, hostport: str, default: int) -> tuple[str, int]:
    if "%" in hostport:
        raise _refuse(uri, "has a percent-encoded host")
    host, port = (hostport.rsplit(":", 1) if hostport.rfind(":") > hostport.rfind("]") else (hostport, None))
    if not host:
        raise _refuse(uri, "has no host")
    return _host(uri, host), _port(uri, port, default)


def parse_endpoint(uri: str) -> Endpoint:
    """An http(s) endpoint (catalog, OAuth2 token, S3); ``EndpointError`` for anything ambiguous."""
    scheme, authority, path, query = _split(uri, HTTP_SCHEMES, uri)
    if "@" in authority:
        raise _refuse(uri, "has user information ('user@'); credentials belong in the catalog's Secret")
    if query is not None:
        raise _refuse(uri, "has a query string")
    host, port = _host_and_port(uri, authority, HTTP_SCHEMES[scheme])
    return Endpoint(scheme, host, port, _path(uri, path))


@dataclass(frozen=True)
class SqlUri:
    """A PostgreSQL catalog URI taken apart: the server (what the allow-list checks) and what to send it."""

    endpoint: Endpoint
    database: str
    username: str | None
    password: str | None
    options: dict[str, str]  #: only ``SQL_OPTIONS``


SQL_OPTIONS = frozenset({"sslmode", "application_name"})


def parse_sql_uri(uri: str) -> SqlUri:
    """A ``postgresql://user:password@host[:port]/database[?sslmode=...]`` catalog URI.

    The user information is credentials (percent-encoded, at most one ``@``); the host and port
    are parsed with the same care as an HTTP endpoint's. Query options that could move the
    connection elsewhere (``host``, ``hostaddr``, ``port``, ``service``, ...) are refused: only
    ``sslmode`` and ``application_name`` pass. The operator connects with a URL built from these parts.
    """
    shown = redact(uri)
    scheme, authority, path, query = _split(uri, SQL_SCHEMES, shown)
    if authority.count("@") > 1:
        raise _refuse(shown, "has more than one '@' (percent-encode it in the password)")
    userinfo, _, hostport = authority.rpartition("@")
    if "," in hostport:
        raise _refuse(shown, "names several hosts")
    host, port = _host_and_port(shown, hostport, SQL_SCHEMES[scheme])
    options = dict(parse_qsl(query or "", keep_blank_values=True, strict_parsing=bool(query)))
    refused = sorted(set(options) - SQL_OPTIONS)
    if refused:
        raise _refuse(shown, f"has connection options {', '.join(refused)}; only "
                             f"{', '.join(sorted(SQL_OPTIONS))} are accepted")
    username, _, password = userinfo.partition(":")
    database = unquote(path.removeprefix("/"))
    return SqlUri(Endpoint("postgresql", host, port, _path(shown, path)), database,
                  unquote(username) if userinfo else None, unquote(password) if ":" in userinfo else None, options)


def redact(uri: str) -> str:
    """The URI without its user information (a SQL URI carries credentials there)."""
    scheme, separator, rest = uri.partition("://")
    authority, slash, tail = rest.partition("/")
    if not separator or "@" not in authority:
        return uri
    return f"{scheme}{separator}{authority.rsplit('@', 1)[1]}{slash}{tail}"


def parse_allow_list(entries: Iterable[str]) -> tuple[Endpoint, ...]:
    """``--allowed-catalog-uris`` entries, each parsed as an endpoint (``EndpointError`` names a bad one)."""
    return tuple(parse_sql_uri(entry).endpoint if entry.lower().startswith("postgres") else parse_endpoint(entry)
                 for entry in entries)


def allowed(endpoint: Endpoint, allow_list: tuple[Endpoint, ...]) -> bool:
    """Whether the operator may connect to ``endpoint`` (an empty allow-list allows any)."""
    return not allow_list or any(endpoint.within(entry) for entry in allow_list)
