"""Launch one version of a sync: its spec ConfigMap first, then the SparkApplication that mounts it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from icebergsync.spec import IcebergSync
from icebergsync_operator.kube import KubeApi
from icebergsync_operator.render import build_spark_application, build_spec_configmap
from icebergsync_operator.settings import OperatorSettings

log = logging.getLogger(__name__)


def launch(api: KubeApi, body: Mapping[str, Any], sync: IcebergSync, version: int,
           settings: OperatorSettings) -> str:
    """Create (idempotently) the ConfigMap and the SparkApplication of ``version``; return the app name."""
    metadata = body["metadata"]
    generation, uid = int(metadata["generation"]), str(metadata["uid"])
    api.create_configmap(build_spec_configmap(sync, body["spec"], version, generation, uid))
    application = build_spark_application(sync, version, generation, uid, settings)
    created = api.create_application(application)
    name = str(application["metadata"]["name"])
    log.info("sink %s version %d: %s SparkApplication %s/%s", sync.sink_id, version,
             "created" if created else "found existing", sync.metadata.namespace, name)
    return name
