"""The operator's guarded access to a tenant's catalog (it only reads what the table says).

The operator runs with its own environment and credentials and opens catalogs that tenants name,
so, unlike the job, it:

- never expands ``${env:NAME}``: a property using it is left out (only the job expands it, from
  its own environment);
- passes only ``ALLOWED_PROPERTIES`` (from the spec, the Secret, and the REST server's config), so
  no property can load code, read local files or redirect credentials;
- connects only to endpoints under ``--allowed-catalog-uris`` (when set);
- bounds every catalog and FileIO call with ``--catalog-timeout``;
- reports failures without remote content: "catalog at http://… returned HTTP 500", never the body.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.typedef import EMPTY_DICT, Properties
from requests.adapters import HTTPAdapter

from icebergsync import spec as model
from icebergsync.catalog import sql_connection_uri

ENV_REFERENCE = "${env:"
# Properties the operator passes on: authentication to the catalog, and S3 FileIO settings.
ALLOWED_PROPERTIES = frozenset({
    "warehouse", "credential", "token", "scope", "audience", "resource", "oauth2-server-uri",
    "s3.endpoint", "s3.region", "s3.access-key-id", "s3.secret-access-key", "s3.session-token",
    "s3.path-style-access", "s3.force-virtual-addressing", "prefix",
})
# Properties naming an endpoint the operator would connect to (checked against the allow-list).
ENDPOINT_PROPERTIES = ("uri", "oauth2-server-uri", "s3.endpoint")


class CatalogAccessError(Exception):
    """The operator will not or could not read the catalog; the message is safe to show anywhere."""


def redact(uri: str) -> str:
    """The URI without user name or password (a SQL URI may carry them)."""
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def endpoint_problem(uri: str, allowed_prefixes: tuple[str, ...]) -> str | None:
    """Why the operator may not connect to ``uri``, or None (an empty allow-list allows all)."""
    if not allowed_prefixes or any(redact(uri).startswith(prefix) for prefix in allowed_prefixes):
        return None
    return (f"{redact(uri)} is not among the endpoints this operator may connect to "
            f"(--allowed-catalog-uris: {', '.join(allowed_prefixes)})")


def _allowed(properties: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in properties.items()
            if key in ALLOWED_PROPERTIES and ENV_REFERENCE not in value}


def operator_properties(catalog: model.Catalog, secret_values: Mapping[str, str], timeout: float,
                        allowed_prefixes: tuple[str, ...]) -> dict[str, str]:
    """The catalog properties the operator uses: allow-listed, unexpanded, with FileIO timeouts."""
    properties = {**_allowed(catalog.properties), **_allowed(secret_values), "uri": catalog.uri}
    if catalog.type == "sql":
        properties["uri"] = sql_connection_uri(catalog.uri, connect_timeout=timeout)
    if catalog.warehouse and "warehouse" not in properties:
        properties["warehouse"] = catalog.warehouse
    _check_endpoints(properties, allowed_prefixes)
    properties["s3.connect-timeout"] = properties["s3.request-timeout"] = str(timeout)
    return properties


def _check_endpoints(properties: Mapping[str, str], allowed_prefixes: tuple[str, ...]) -> None:
    for key in ENDPOINT_PROPERTIES:
        problem = endpoint_problem(properties[key], allowed_prefixes) if key in properties else None
        if problem:
            raise CatalogAccessError(f"catalog {key} {problem}")


class _TimeoutAdapter(HTTPAdapter):
    """Every request through it gets the timeout (connect and each read), and no retries."""

    def __init__(self, timeout: float):
        super().__init__(max_retries=0)
        self.timeout = timeout

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs["timeout"] = self.timeout
        return super().send(request, *args, **kwargs)


class GuardedRestCatalog(RestCatalog):
    """A REST catalog whose requests time out and whose server config cannot widen its properties."""

    def __init__(self, name: str, timeout: float, allowed_prefixes: tuple[str, ...], **properties: str):
        self._timeout = timeout
        self._allowed_prefixes = allowed_prefixes
        super().__init__(name, **properties)

    def _create_session(self) -> requests.Session:
        session = super()._create_session()
        adapter = _TimeoutAdapter(self._timeout)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session

    def _fetch_config(self) -> None:
        super()._fetch_config()
        timeouts = {key: value for key, value in self.properties.items() if key.endswith("-timeout")}
        self.properties = {**_allowed(self.properties), "uri": self.uri, **timeouts}
        _check_endpoints(self.properties, self._allowed_prefixes)

    def _load_file_io(self, properties: Properties = EMPTY_DICT, location: str | None = None) -> FileIO:
        return load_file_io({**self.properties, **_allowed(properties)}, location)


def _open(catalog: model.Catalog, properties: dict[str, str], timeout: float,
          allowed_prefixes: tuple[str, ...]) -> Catalog:
    if catalog.type == "rest":
        return GuardedRestCatalog(catalog.name, timeout, allowed_prefixes, **properties)
    return SqlCatalog(catalog.name, **properties)


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def describe_failure(error: BaseException, uri: str, timeout: float) -> str:
    """What went wrong, from the error's type and HTTP status only (never a remote body or message)."""
    where = f"catalog at {redact(uri)}"
    for link in _chain(error):
        if isinstance(link, CatalogAccessError):
            return str(link)
        response = getattr(link, "response", None)
        if isinstance(link, requests.HTTPError) and response is not None:
            return f"{where} returned HTTP {response.status_code}"
        if isinstance(link, (requests.Timeout, TimeoutError)):
            return f"{where} did not answer within {timeout:g}s"
        if isinstance(link, requests.ConnectionError):
            return f"cannot connect to the {where}"
    return f"reading the {where} failed ({type(error).__name__})"


def open_guarded(catalog: model.Catalog, secret_values: Mapping[str, str], timeout: float,
                 allowed_prefixes: tuple[str, ...]) -> Catalog:
    """Open the catalog for the operator; raise ``CatalogAccessError`` with a safe message."""
    try:
        properties = operator_properties(catalog, secret_values, timeout, allowed_prefixes)
        return _open(catalog, properties, timeout, allowed_prefixes)
    except Exception as error:
        raise CatalogAccessError(describe_failure(error, catalog.uri, timeout)) from error
