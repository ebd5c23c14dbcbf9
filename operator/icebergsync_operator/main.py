"""``icebergsync-operator``: parse settings, register handlers, run kopf (with peering)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence

import kopf
from kubernetes.client.rest import ApiException

from icebergsync_operator import handlers, metrics
from icebergsync_operator.catalogs import handlers as catalog_handlers
from icebergsync_operator.context import OperatorContext
from icebergsync_operator.kube import KubeApi, load_api_client
from icebergsync_operator.peering import prepare_peering
from icebergsync_operator.settings import parse_settings

log = logging.getLogger("icebergsync_operator")


def main(argv: Sequence[str] | None = None) -> int:
    started_at = time.time()
    settings, log_level = parse_settings(argv)
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    api_client, in_cluster = load_api_client()
    if in_cluster and settings.allow_local_catalogs:
        log.error("--allow-local-catalogs is for an operator run outside a cluster: in a pod, the operator never "
                  "opens a local file for a catalog")
        return 1
    api = KubeApi(api_client)
    if not settings.standalone:
        try:
            prepare_peering(api, settings)
        except ApiException as error:
            log.error("cannot create or read the peering object %r (%s %s): install crds/kopf-peering.yaml or run "
                      "with --standalone", settings.peering_name, error.status, error.reason)
            return 1
    registry = kopf.OperatorRegistry()
    context = OperatorContext(api=api, settings=settings)
    handlers.register(registry, context)
    catalog_handlers.register(registry, context)
    metrics.serve(settings.metrics_port, settings.metrics_address)
    priority = settings.peering_priority(started_at)
    log.info("starting: namespaces=%s peering=%s priority=%d", ",".join(settings.namespaces) or "<all>",
             "standalone" if settings.standalone else settings.peering_name, priority)
    kopf.run(
        registry=registry,
        clusterwide=settings.clusterwide,
        namespaces=settings.namespaces,
        standalone=settings.standalone,
        peering_name=None if settings.standalone else settings.peering_name,
        priority=priority,
        liveness_endpoint=settings.liveness_endpoint or None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
