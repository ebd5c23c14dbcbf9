"""The Secrets a sync's job mounts, and whether their types may be mounted.

Every Secret the resolved spec names is mounted into the driver and executors. Only credential
types are: ``Opaque``, ``kubernetes.io/basic-auth`` and ``kubernetes.io/tls``; never a
service-account token, a registry credential or a bootstrap token, which an author could otherwise
read through the job (docs/security.md). The operator reads each type before every reconcile's
decision; a Secret that does not exist yet is waited for, never launched with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kubernetes.client.rest import ApiException

from icebergsync.spec import IcebergSync

ALLOWED_TYPES = ("Opaque", "kubernetes.io/basic-auth", "kubernetes.io/tls")
INLINE_CATALOG_FIELD = "spec.table.catalog.secretRef"


@dataclass(frozen=True)
class NamedSecret:
    """A Secret the spec names, and the field that names it."""

    field: str
    name: str


@dataclass(frozen=True)
class SecretCheck:
    """What the Secrets' types say: refused fields, and Secrets that do not exist yet."""

    problems: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()


def catalog_secret_field(sync: IcebergSync) -> str:
    """Where the catalog's Secret is named: inline, or in the catalog resource ``sync`` (unresolved) names."""
    ref = sync.spec.table.catalog_ref
    if ref is None:
        return INLINE_CATALOG_FIELD
    held = "spec.jobSecretRef" if ref.kind == "ClusterIcebergCatalog" else "spec.secretRef"
    return f"spec.table.catalogRef ({ref.kind} {ref.name!r}, {held})"


def named_secrets(sync: IcebergSync, catalog_field: str = INLINE_CATALOG_FIELD) -> tuple[NamedSecret, ...]:
    """Every Secret ``sync`` (its catalog resolved) names, with its field; ``catalog_field`` names the catalog's."""
    source = sync.spec.source
    refs = ((catalog_field, sync.spec.table.catalog_or_default.secret_ref),
            ("spec.source.files.secretRef", source.files.secret_ref if source.files else None),
            ("spec.source.kafka.secretRef", source.kafka.secret_ref if source.kafka else None))
    return tuple(NamedSecret(field, ref.name) for field, ref in refs if ref is not None)


def check_secrets(secret_type: Callable[[str], str | None], secrets: tuple[NamedSecret, ...]) -> SecretCheck:
    """Each Secret's type (``secret_type``: by name, None when missing) against ``ALLOWED_TYPES``.

    A Secret the operator may not read (HTTP 403) cannot be checked, so it is refused; other API
    errors propagate (the reconcile is retried).
    """
    problems, missing = [], []
    types: dict[str, str | None] = {}
    for secret in secrets:
        try:
            if secret.name not in types:
                types[secret.name] = secret_type(secret.name)
        except ApiException as error:
            if error.status != 403:
                raise
            problems.append(f"{secret.field}: the operator may not read Secret {secret.name!r} to check its type "
                            "(403 Forbidden); grant it get on Secrets of this namespace (chart value rbac.secrets)")
            continue
        kind = types[secret.name]
        if kind is None:
            missing.append(f"Secret {secret.name!r} ({secret.field})")
        elif kind not in ALLOWED_TYPES:
            problems.append(f"{secret.field}: Secret {secret.name!r} is of type {kind}; a job mounts only "
                            f"{', '.join(ALLOWED_TYPES)} Secrets")
    return SecretCheck(tuple(problems), tuple(missing))
