"""The operator's guarded access to a tenant's catalog: it reads one table's metadata and nothing else.

The operator runs with its own environment and credentials and opens catalogs that tenants name,
so, unlike the job, it:

- never expands ``${env:NAME}``: a property using it is left out (only the job expands it, from
  its own environment);
- passes only ``ALLOWED_PROPERTIES`` (from the spec, the Secret, and the REST server's config), so
  no property can load code, read local files or redirect credentials;
- parses every endpoint once (``endpoints``) and connects only to that parse, and only where the
  catalog's ``CatalogScope`` allows (the admin's ``--allowed-catalog-uris``; no local file in a cluster);
- reads the metadata within one deadline (``--catalog-timeout``) covering every connection, TLS
  handshake, token exchange, query and body, with no body above ``--catalog-max-bytes`` and every
  body within the operator's memory for catalog reads (``catalog_memory``);
- reports failures without remote content: "catalog at http://… returned HTTP 500", never the body.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import requests

from icebergsync import spec as model
from icebergsync_operator.bounded_http import RefusedResponse
from icebergsync_operator.catalog_memory import TooLarge
from icebergsync_operator.endpoints import (
    Endpoint,
    EndpointError,
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


class CatalogAccessError(Exception):
    """The operator will not or could not read the catalog; the message is safe to show anywhere."""


class CatalogBackoff(CatalogAccessError):
    """A failure retried only after a backoff (``--backoff-base``/``--backoff-cap``), not every status refresh."""


class CatalogTimeout(CatalogBackoff):
    """The catalog did not answer within the read's deadline."""


class CatalogTooLarge(CatalogBackoff):
    """An answer over ``--catalog-max-bytes``, or a read the operator's memory for catalog reads cannot hold."""


def catalog_endpoint(catalog: model.Catalog) -> Endpoint | None:
    """The server a catalog's ``uri`` names (None: a local SQLite file); ``EndpointError`` if ambiguous."""
    if catalog.type == "rest":
        return parse_endpoint(catalog.uri)
    if catalog.uri.startswith("sqlite:"):
        return None
    return parse_sql_uri(catalog.uri).endpoint


def endpoint_problem(catalog: model.Catalog) -> str | None:
    """Why the catalog's ``uri`` is refused whatever the allow-list (it is ambiguous), or None."""
    try:
        catalog_endpoint(catalog)
    except EndpointError as error:
        return str(error)
    return None


def allowed_only(properties: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in properties.items()
            if key in ALLOWED_PROPERTIES and ENV_REFERENCE not in value}


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


def is_too_large(error: BaseException) -> bool:
    """Whether ``error`` comes from an answer over the size cap or the memory for catalog reads."""
    return any(isinstance(link, TooLarge) for link in _chain(error))


def describe_failure(error: BaseException, uri: str, timeout: float) -> str:
    """What went wrong, from the error's type and HTTP status only (never a remote body or message)."""
    where = f"catalog at {redact(uri)}"
    for link in _chain(error):
        if isinstance(link, (CatalogAccessError, EndpointError)):
            return str(link)
        if isinstance(link, (RefusedResponse, TooLarge)):
            return f"{where} {link}"
        response = getattr(link, "response", None)
        if isinstance(link, requests.HTTPError) and response is not None:
            return f"{where} returned HTTP {response.status_code}"
        if isinstance(link, (requests.Timeout, TimeoutError)):
            return timed_out(uri, timeout)
        if isinstance(link, requests.ConnectionError):
            return f"cannot connect to the {where}"
    return f"reading the {where} failed ({type(error).__name__})"
