"""Delete a sync's SparkApplications and their spec ConfigMaps. The table is never touched."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from icebergsync_operator.kube import KubeApi

log = logging.getLogger(__name__)


def delete_applications(api: KubeApi, namespace: str, sync_name: str, names: Iterable[str]) -> None:
    """Delete these applications of the sync, each with its spec ConfigMap(s) (selected by label)."""
    for name in names:
        api.delete_application(namespace, name)
        for configmap in api.list_configmap_names(namespace, sync_name, application=name):
            api.delete_configmap(namespace, configmap)
        log.info("deleted SparkApplication %s/%s and its spec ConfigMap", namespace, name)


def delete_everything(api: KubeApi, namespace: str, sync_name: str) -> list[str]:
    """Delete every application and ConfigMap labelled with the sync (the finalizer's job)."""
    names = [app["metadata"]["name"] for app in api.list_applications(namespace, sync_name)]
    delete_applications(api, namespace, sync_name, names)
    for configmap in api.list_configmap_names(namespace, sync_name):
        api.delete_configmap(namespace, configmap)
    return names
