"""Read what the table says about a sink, with catalog credentials read from their Secret (in memory)."""

from __future__ import annotations

import logging

from kubernetes.client.rest import ApiException
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from icebergsync.catalog import open_catalog
from icebergsync.errors import IcebergSyncError
from icebergsync.sink_state import read_sink_state
from icebergsync.spec import IcebergSync
from icebergsync_operator.kube import KubeApi
from icebergsync_operator.status_update import TableObservation

log = logging.getLogger(__name__)


def observe_table(api: KubeApi, sync: IcebergSync) -> TableObservation:
    """The sink's state from the table; a missing table is no error (the first job creates it)."""
    catalog = sync.spec.table.catalog
    secret_values = None
    if catalog.secret_ref is not None:
        try:
            secret_values = api.read_secret(sync.metadata.namespace, catalog.secret_ref.name)
        except ApiException as error:
            return TableObservation(error=f"cannot read Secret {catalog.secret_ref.name!r} of the catalog: "
                                          f"{error.status} {error.reason}")
    try:
        return TableObservation(sink=read_sink_state(open_catalog(catalog, secret_values), sync.spec.table.name,
                                                      sync.sink_id))
    except (NoSuchTableError, NoSuchNamespaceError):
        return TableObservation()
    except IcebergSyncError as error:
        return TableObservation(error=str(error))
    except Exception as error:  # a catalog or FileIO error of any library: report it, keep reconciling
        log.warning("reading table %s for %s failed", sync.spec.table.name, sync.sink_id, exc_info=True)
        return TableObservation(error=f"cannot read table {sync.spec.table.name}: {type(error).__name__}: {error}")
