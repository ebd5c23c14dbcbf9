"""The operator's Kubernetes API calls (the only module that talks to the API server directly)."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from icebergsync_operator.constants import (
    APPLICATION_LABEL,
    COMPONENT,
    FIELD_MANAGER,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    SPARK_GROUP,
    SPARK_PLURAL,
    SPARK_VERSION,
    SYNC_GROUP,
    SYNC_KIND,
    SYNC_LABEL,
    SYNC_PLURAL,
    SYNC_VERSION,
)

log = logging.getLogger(__name__)


class UnreadableSecretError(Exception):
    """A Secret value that is not text (binary data cannot be a catalog property)."""


def _create(call: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
    """Run a create call; False when the object already exists (so retried creates are idempotent)."""
    try:
        call(*args, **kwargs)
    except ApiException as error:
        if error.status == 409:
            return False
        raise
    return True


def _unless_missing(call: Callable[..., Any], *args: Any) -> Any:
    """Run a call on one object: its result, or None when the object does not exist (so deleting one
    that is already gone is fine)."""
    try:
        return call(*args)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def load_api_client() -> tuple[client.ApiClient, bool]:
    """In-cluster credentials when running in a pod, else the kubeconfig ($KUBECONFIG); and whether in a pod."""
    try:
        config.load_incluster_config()
        in_cluster = True
    except config.ConfigException:
        config.load_kube_config()
        in_cluster = False
    return client.ApiClient(), in_cluster


class KubeApi:
    """Typed access to IcebergSyncs, their SparkApplications, ConfigMaps, Secrets and Events."""

    def __init__(self, api_client: client.ApiClient):
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    # IcebergSync -------------------------------------------------------------------------

    def get_sync(self, namespace: str, name: str) -> dict[str, Any] | None:
        body = _unless_missing(self.custom.get_namespaced_custom_object, SYNC_GROUP, SYNC_VERSION, namespace,
                               SYNC_PLURAL, name)
        return None if body is None else cast(dict[str, Any], body)

    def patch_sync_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Replace the operator-owned status fields (merge patch; null removes a field)."""
        self.custom.patch_namespaced_custom_object_status(
            SYNC_GROUP, SYNC_VERSION, namespace, SYNC_PLURAL, name, {"status": dict(status)},
            field_manager=FIELD_MANAGER,
        )

    # Catalog resources and namespaces --------------------------------------------------------

    def get_catalog(self, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """An IcebergCatalog (``namespace`` given) or ClusterIcebergCatalog; None when it does not exist."""
        if namespace:
            body = _unless_missing(self.custom.get_namespaced_custom_object, SYNC_GROUP, SYNC_VERSION, namespace,
                                   plural, name)
        else:
            body = _unless_missing(self.custom.get_cluster_custom_object, SYNC_GROUP, SYNC_VERSION, plural, name)
        return None if body is None else cast(dict[str, Any], body)

    def patch_catalog_status(self, plural: str, namespace: str | None, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch a catalog resource's status."""
        patch = {"status": dict(status)}
        if namespace:
            self.custom.patch_namespaced_custom_object_status(SYNC_GROUP, SYNC_VERSION, namespace, plural, name, patch,
                                                              field_manager=FIELD_MANAGER)
        else:
            self.custom.patch_cluster_custom_object_status(SYNC_GROUP, SYNC_VERSION, plural, name, patch,
                                                           field_manager=FIELD_MANAGER)

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        """A namespace's labels."""
        found = self.core.read_namespace(namespace)
        return dict((found.metadata and found.metadata.labels) or {})

    # SparkApplications and ConfigMaps ------------------------------------------------------

    @staticmethod
    def _selector(sync_name: str) -> str:
        return f"{MANAGED_BY_LABEL}={MANAGED_BY},{SYNC_LABEL}={sync_name}"

    def list_applications(self, namespace: str, sync_name: str) -> list[dict[str, Any]]:
        result = cast(dict[str, Any], self.custom.list_namespaced_custom_object(
            SPARK_GROUP, SPARK_VERSION, namespace, SPARK_PLURAL, label_selector=self._selector(sync_name)))
        return list(result.get("items", []))

    def create_application(self, body: Mapping[str, Any]) -> bool:
        return _create(self.custom.create_namespaced_custom_object, SPARK_GROUP, SPARK_VERSION,
                       body["metadata"]["namespace"], SPARK_PLURAL, dict(body), field_manager=FIELD_MANAGER)

    def create_configmap(self, body: Mapping[str, Any]) -> bool:
        return _create(self.core.create_namespaced_config_map, body["metadata"]["namespace"], dict(body),
                       field_manager=FIELD_MANAGER)

    def delete_application(self, namespace: str, name: str) -> None:
        _unless_missing(self.custom.delete_namespaced_custom_object, SPARK_GROUP, SPARK_VERSION, namespace,
                        SPARK_PLURAL, name)

    def delete_configmap(self, namespace: str, name: str) -> None:
        _unless_missing(self.core.delete_namespaced_config_map, name, namespace)

    def read_configmap_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's data; None when it does not exist."""
        config_map = _unless_missing(self.core.read_namespaced_config_map, name, namespace)
        return None if config_map is None else dict(config_map.data or {})

    def list_configmap_names(self, namespace: str, sync_name: str, application: str | None = None) -> list[str]:
        """The sync's ConfigMaps (only those of ``application`` when given)."""
        selector = self._selector(sync_name) + (f",{APPLICATION_LABEL}={application}" if application else "")
        items = self.core.list_namespaced_config_map(namespace, label_selector=selector).items
        return [item.metadata.name for item in items if item.metadata and item.metadata.name]

    # Secrets and Events ------------------------------------------------------------------

    def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        """A Secret's values as text, kept in memory only; ``UnreadableSecretError`` names a binary key."""
        secret = self.core.read_namespaced_secret(name, namespace)
        values = {}
        for key, value in sorted((secret.data or {}).items()):
            try:
                values[key] = base64.b64decode(value).decode()
            except (ValueError, UnicodeDecodeError):
                raise UnreadableSecretError(f"Secret {name!r} in namespace {namespace}: the value of key {key!r} "
                                            f"is not UTF-8 text") from None
        return values

    def secret_type(self, namespace: str, name: str) -> str | None:
        """A Secret's type; None when it does not exist (its values are not kept)."""
        secret = _unless_missing(self.core.read_namespaced_secret, name, namespace)
        return None if secret is None else str(secret.type or "Opaque")

    def post_event(self, owner: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on an IcebergSync or catalog resource (failures to post are logged, never raised).

        A cluster-scoped object's events go to the ``default`` namespace, where kubectl describe looks.
        """
        metadata = owner["metadata"]
        namespace = metadata.get("namespace") or "default"
        now = datetime.now(UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{metadata['name']}.", namespace=namespace),
            involved_object=client.V1ObjectReference(
                api_version=f"{SYNC_GROUP}/{SYNC_VERSION}", kind=owner.get("kind", SYNC_KIND), name=metadata["name"],
                namespace=metadata.get("namespace"), uid=metadata.get("uid"),
                resource_version=metadata.get("resourceVersion")),
            type=type_, reason=reason, message=message[:1024], count=1,
            first_timestamp=now, last_timestamp=now, event_time=None,
            source=client.V1EventSource(component=COMPONENT), reporting_component=COMPONENT,
        )
        try:
            self.core.create_namespaced_event(namespace, event)
        except ApiException as error:
            log.warning("could not post event %s on %s/%s: %s", reason, namespace, metadata["name"], error.reason)

    # Peering -----------------------------------------------------------------------------

    def ensure_peering(self, name: str, namespaces: tuple[str, ...]) -> None:
        """Create the KopfPeering objects (or the ClusterKopfPeering) replicas coordinate through."""
        body = {"apiVersion": "kopf.dev/v1", "metadata": {"name": name}}
        if not namespaces:
            _create(self.custom.create_cluster_custom_object, "kopf.dev", "v1", "clusterkopfpeerings",
                    {**body, "kind": "ClusterKopfPeering"})
        for namespace in namespaces:
            _create(self.custom.create_namespaced_custom_object, "kopf.dev", "v1", namespace, "kopfpeerings",
                    {**body, "kind": "KopfPeering"})

    def missing_peerings(self, name: str, namespaces: tuple[str, ...]) -> list[str]:
        """Where the peering object is absent: the namespaces lacking a KopfPeering, or ``["cluster-wide"]``."""
        if not namespaces:
            peering = _unless_missing(self.custom.get_cluster_custom_object, "kopf.dev", "v1", "clusterkopfpeerings",
                                      name)
            return ["cluster-wide"] if peering is None else []
        return [namespace for namespace in namespaces if _unless_missing(
            self.custom.get_namespaced_custom_object, "kopf.dev", "v1", namespace, "kopfpeerings", name) is None]
