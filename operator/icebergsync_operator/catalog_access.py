"""The operator's guarded access to a tenant's catalog: it reads one table's metadata and nothing else.

The operator runs with its own environment and credentials and opens catalogs that tenants name,
so, unlike the job, it:

- never expands ``${env:NAME}``: a property using it is left out (only the job expands it, from
  its own environment);
- passes only ``ALLOWED_PROPERTIES`` (from the spec, the Secret, and the REST server's config), so
  no property can load code, read local files or redirect credentials;
- parses every endpoint once (``endpoints``) and connects only to that parse, and only when it is
  under ``--allowed-catalog-uris`` (when set);
- reads the metadata within one deadline (``--catalog-timeout``) covering every connection, TLS
  handshake, token exchange, query and body, with no body above ``--catalog-max-bytes``;
- reports failures without remote content: "catalog at http://… returned HTTP 500", never the body.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import requests

from icebergsync import spec as model
from icebergsync_operator.bounded_http import RefusedResponse
from icebergsync_operator.endpoints import (
    Endpoint,
    EndpointError,
    allowed,
    parse_allow_list,
    parse_endpoint,
    parse_sql_uri,
    redact,
)

ENV_REFERENCE = "${env:"
# Properties the operator passes on: authentication to the catalog, and S3 FileIO settings.
ALLOWED_PROPERTIES = frozenset({
    "warehouse", "credential", "token", "scope", "audience", "resource", "oauth2-server-uri",
    "s3.endpoint", "s3.region", "s3.access-key-id", "s3.secret-access-key", "s3.session-token",
    "s3.path-style-access", "s3.force-virtual-addressing", "prefix",
})
# Properties naming an endpoint the operator would connect to (parsed and canonicalised). The first two
# are requested at or below their own path and are allow-checked up front; S3 requests name a bucket
# and key below ``s3.endpoint`` (an allow-list entry may name the bucket), so each is checked as sent.
ENDPOINT_PROPERTIES = ("uri", "oauth2-server-uri", "s3.endpoint")
CHECKED_UP_FRONT = ("uri", "oauth2-server-uri")


class CatalogAccessError(Exception):
    """The operator will not or could not read the catalog; the message is safe to show anywhere."""


class CatalogTimeout(CatalogAccessError):
    """The catalog did not answer within the read's deadline."""


def _not_allowed(uri: str, allow_list: tuple[str, ...]) -> str:
    return (f"{redact(uri)} is not among the endpoints this operator may connect to "
            f"(--allowed-catalog-uris: {', '.join(allow_list)})")


def catalog_endpoint(catalog: model.Catalog) -> Endpoint | None:
    """The server a catalog's ``uri`` names (None: a local SQLite file); ``EndpointError`` if ambiguous."""
    if catalog.type == "rest":
        return parse_endpoint(catalog.uri)
    if catalog.uri.startswith("sqlite:"):
        return None
    return parse_sql_uri(catalog.uri).endpoint


def endpoint_problem(catalog: model.Catalog, allow_list: tuple[str, ...]) -> str | None:
    """Why the operator may not connect to the catalog's ``uri``, or None (an empty allow-list allows any)."""
    try:
        endpoint = catalog_endpoint(catalog)
    except EndpointError as error:
        return str(error)
    if not allow_list or (endpoint is not None and allowed(endpoint, parse_allow_list(allow_list))):
        return None
    return _not_allowed(catalog.uri, allow_list)


def check_endpoint(endpoint: Endpoint, allow_list: tuple[str, ...]) -> None:
    """``CatalogAccessError`` unless the operator may connect to ``endpoint``."""
    if not allowed(endpoint, parse_allow_list(allow_list)):
        raise CatalogAccessError(_not_allowed(endpoint.url, allow_list))


def allowed_only(properties: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in properties.items()
            if key in ALLOWED_PROPERTIES and ENV_REFERENCE not in value}


def checked_endpoints(properties: Mapping[str, str], allow_list: tuple[str, ...]) -> dict[str, str]:
    """``properties`` with each endpoint parsed, allowed (see ``CHECKED_UP_FRONT``), and replaced by its canonical URL."""
    result = dict(properties)
    for key in ENDPOINT_PROPERTIES:
        if key not in properties:
            continue
        try:
            endpoint = parse_endpoint(properties[key])
            if key in CHECKED_UP_FRONT:
                check_endpoint(endpoint, allow_list)
        except (EndpointError, CatalogAccessError) as error:
            raise CatalogAccessError(f"catalog {key} {error}") from None
        result[key] = endpoint.url
    return result


def operator_properties(catalog: model.Catalog, secret_values: Mapping[str, str]) -> dict[str, str]:
    """The catalog properties the operator may use: allow-listed and unexpanded (no ``uri``)."""
    properties = {**allowed_only(catalog.properties), **allowed_only(secret_values)}
    if catalog.warehouse_location and "warehouse" not in properties:
        properties["warehouse"] = catalog.warehouse_location
    return properties


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def timed_out(uri: str, timeout: float) -> str:
    return f"catalog at {redact(uri)} did not answer within {timeout:g}s"


def is_timeout(error: BaseException) -> bool:
    """Whether ``error`` comes from a timeout (of a socket, a request or the read's deadline)."""
    return any(isinstance(link, (requests.Timeout, TimeoutError)) for link in _chain(error))


def describe_failure(error: BaseException, uri: str, timeout: float) -> str:
    """What went wrong, from the error's type and HTTP status only (never a remote body or message)."""
    where = f"catalog at {redact(uri)}"
    for link in _chain(error):
        if isinstance(link, (CatalogAccessError, EndpointError)):
            return str(link)
        if isinstance(link, RefusedResponse):
            return f"{where} {link}"
        response = getattr(link, "response", None)
        if isinstance(link, requests.HTTPError) and response is not None:
            return f"{where} returned HTTP {response.status_code}"
        if isinstance(link, (requests.Timeout, TimeoutError)):
            return timed_out(uri, timeout)
        if isinstance(link, requests.ConnectionError):
            return f"cannot connect to the {where}"
    return f"reading the {where} failed ({type(error).__name__})"
