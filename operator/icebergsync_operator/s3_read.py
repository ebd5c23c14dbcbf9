"""Reading one S3 object for the operator: a SigV4-signed, path-style GET on the bounded transport.

The operator reads a SQL catalog's metadata file from S3 itself rather than through pyarrow's
native client, so the read obeys the same deadline, size cap, endpoint parse and allow-list as
every other request, and is signed only with the tenant's own keys (``s3.access-key-id``,
``s3.secret-access-key``, ``s3.session-token`` from its spec or Secret) — never with the
operator's environment or instance role; without keys the request is anonymous.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

import requests

from icebergsync_operator.endpoints import Endpoint, parse_endpoint

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
DEFAULT_REGION = "us-east-1"


def object_endpoint(location: str, properties: Mapping[str, str]) -> tuple[Endpoint, str]:
    """The server (``s3.endpoint``, else AWS's regional one) and the path-style path of an object."""
    parts = urlsplit(location)
    region = properties.get("s3.region", DEFAULT_REGION)
    server = parse_endpoint(properties.get("s3.endpoint") or f"https://s3.{region}.amazonaws.com")
    key = parts.path.lstrip("/")
    return server, f"{server.path}/{quote(parts.netloc, safe='')}/{quote(key, safe='/')}"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(server: Endpoint, path: str, properties: Mapping[str, str], now: datetime) -> dict[str, str]:
    """The headers of an AWS Signature Version 4 GET of ``path`` (none to add without keys)."""
    access_key, secret_key = properties.get("s3.access-key-id"), properties.get("s3.secret-access-key")
    if not access_key or not secret_key:
        return {}
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    headers = {"host": server.netloc, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
    if token := properties.get("s3.session-token"):
        headers["x-amz-security-token"] = token
    names = ";".join(sorted(headers))
    canonical = "\n".join(["GET", path, "", *(f"{name}:{headers[name]}" for name in sorted(headers)), "", names,
                           EMPTY_SHA256])
    scope = f"{stamp[:8]}/{properties.get('s3.region', DEFAULT_REGION)}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{secret_key}".encode()
    for part in scope.split("/"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={names}, "
                                f"Signature={signature}")
    del headers["host"]  # the client sends it, from the same netloc
    return headers


def get_object(session: requests.Session, location: str, properties: Mapping[str, str]) -> bytes:
    """The object's bytes; ``requests.HTTPError`` for an error status (its body is never read into a message)."""
    server, path = object_endpoint(location, properties)
    response = session.get(f"{server.scheme}://{server.netloc}{path}",
                           headers=signed_headers(server, path, properties, datetime.now(UTC)))
    response.raise_for_status()
    return response.content
