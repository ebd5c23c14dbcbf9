"""Where the operator may go for one catalog: the admin's allow-list, who declared the catalog, and local files.

- A catalog a tenant declares (an IcebergCatalog, or inline where allowed) is contacted only at
  endpoints under ``--allowed-catalog-uris`` (``operator.allowedCatalogUris``): an EMPTY list
  means none is contacted.
- A ClusterIcebergCatalog, which only the cluster admin declares, obeys the list when it is set and
  may be contacted anywhere when it is empty.
- A local file (a ``sqlite:`` catalog, a ``file:`` or bare-path metadata location) is opened only
  with ``--allow-local-catalogs``, which the operator refuses to start with inside a cluster.

Every check raises ``CatalogNotAllowed`` before any connection or file is opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from icebergsync import spec as model
from icebergsync_operator.catalog_access import CatalogAccessError
from icebergsync_operator.endpoints import (
    Endpoint,
    EndpointError,
    allowed,
    parse_allow_list,
    parse_endpoint,
    parse_sql_uri,
    redact,
)

NOT_ALLOWED = "CatalogNotAllowed"  #: the condition reason of a catalog the operator may not contact
LOCAL_SCHEME = "sqlite:"
# Properties naming an endpoint the operator would connect to (parsed and canonicalised). The first two
# are requested at or below their own path and are checked up front; S3 requests name a bucket and key
# below ``s3.endpoint`` (an allow-list entry may name the bucket), so each is checked as sent.
ENDPOINT_PROPERTIES = ("uri", "oauth2-server-uri", "s3.endpoint")
CHECKED_UP_FRONT = ("uri", "oauth2-server-uri")
LIST_IT = "the cluster admin must list it in operator.allowedCatalogUris (--allowed-catalog-uris)"


class CatalogNotAllowed(CatalogAccessError):
    """The operator may not contact this endpoint or open this file; the message says who can change that."""


def local_refusal(what: str) -> str:
    return (f"{what} is a local file, which the operator opens only when run outside a cluster with "
            "--allow-local-catalogs")


@dataclass(frozen=True)
class CatalogScope:
    """The endpoints and files the operator may open for one catalog."""

    allow_list: tuple[str, ...]  #: the admin's --allowed-catalog-uris
    admin_declared: bool  #: a ClusterIcebergCatalog: an empty allow-list allows any endpoint
    local_files: bool  #: --allow-local-catalogs: sqlite: catalogs and local metadata files

    def _not_allowed(self, uri: str) -> str:
        if not self.allow_list:
            return (f"{redact(uri)}: the operator contacts no IcebergCatalog or inline catalog while "
                    f"operator.allowedCatalogUris is empty; {LIST_IT}")
        return (f"{redact(uri)} is not among the endpoints this operator may connect to (--allowed-catalog-uris: "
                f"{', '.join(self.allow_list)}); {LIST_IT}")

    def permits(self, endpoint: Endpoint) -> bool:
        if not self.allow_list:
            return self.admin_declared
        return allowed(endpoint, parse_allow_list(self.allow_list))

    def check(self, endpoint: Endpoint) -> None:
        """``CatalogNotAllowed`` unless the operator may connect to ``endpoint``."""
        if not self.permits(endpoint):
            raise CatalogNotAllowed(self._not_allowed(endpoint.url))

    def check_local(self, what: str) -> None:
        """``CatalogNotAllowed`` unless the operator may open local files (``what`` names the file)."""
        if not self.local_files:
            raise CatalogNotAllowed(local_refusal(what))

    def refusal(self, catalog: model.Catalog) -> str | None:
        """Why the operator may not contact the catalog's ``uri``; None when it may, or when the URI does not
        parse (the policy reports that)."""
        if catalog.uri.startswith(LOCAL_SCHEME):
            return None if self.local_files else local_refusal(f"catalog {catalog.uri}")
        try:
            endpoint = parse_endpoint(catalog.uri) if catalog.type == "rest" else parse_sql_uri(catalog.uri).endpoint
        except EndpointError:
            return None
        return None if self.permits(endpoint) else self._not_allowed(catalog.uri)

    def checked_endpoints(self, properties: Mapping[str, str]) -> dict[str, str]:
        """``properties`` with each endpoint parsed, allowed (see ``CHECKED_UP_FRONT``), and replaced by its
        canonical URL."""
        result = dict(properties)
        for key in ENDPOINT_PROPERTIES:
            if key not in properties:
                continue
            try:
                endpoint = parse_endpoint(properties[key])
                if key in CHECKED_UP_FRONT:
                    self.check(endpoint)
            except EndpointError as error:
                raise CatalogAccessError(f"catalog {key} {error}") from None
            except CatalogNotAllowed as error:
                raise CatalogNotAllowed(f"catalog {key} {error}") from None
            result[key] = endpoint.url
        return result
