"""Launch one version of a sync: its spec ConfigMap first, then the SparkApplication that mounts it.

The ConfigMap holds the spec as stored, with a catalogRef replaced by the catalog it resolved to
(the job never reads a catalog resource).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from icebergsync.spec import IcebergSync
from icebergsync_operator.catalogs.resolve import job_spec
from icebergsync_operator.kube import KubeApi
from icebergsync_operator.render import build_spark_application, build_spec_configmap
from icebergsync_operator.settings import OperatorSettings

log = logging.getLogger(__name__)


def ensure_configmap(api: KubeApi, configmap: Mapping[str, Any]) -> None:
    """Create the ConfigMap; one of that name with other data (never ours to trust) is replaced."""
    if api.create_configmap(configmap):
        return
    metadata = configmap["metadata"]
    existing = api.read_configmap_data(metadata["namespace"], metadata["name"])
    if existing == configmap["data"]:
        return
    log.warning("ConfigMap %s/%s holds other data than this launch renders; replacing it",
                metadata["namespace"], metadata["name"])
    api.delete_configmap(metadata["namespace"], metadata["name"])
    if not api.create_configmap(configmap):
        raise RuntimeError(f"ConfigMap {metadata['namespace']}/{metadata['name']} was recreated by someone else")


def launch(api: KubeApi, body: Mapping[str, Any], sync: IcebergSync, version: int,
           settings: OperatorSettings) -> str:
    """Create the spec ConfigMap and the SparkApplication of ``version`` (idempotently); return the app name."""
    metadata = body["metadata"]
    generation, uid = int(metadata["generation"]), str(metadata["uid"])
    configmap = build_spec_configmap(sync, job_spec(body["spec"], sync), version, generation, uid)
    ensure_configmap(api, configmap)
    application = build_spark_application(sync, version, generation, uid, settings,
                                          spec_configmap=configmap["metadata"]["name"])
    created = api.create_application(application)
    name = str(application["metadata"]["name"])
    log.info("sink %s version %d: %s SparkApplication %s/%s", sync.sink_id, version,
             "created" if created else "found existing", sync.metadata.namespace, name)
    return name
