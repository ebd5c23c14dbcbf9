"""Read what the table says about a sink, with the catalog's Secret read (into memory) from the sync's namespace."""

from __future__ import annotations

import logging

from kubernetes.client.rest import ApiException
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from icebergsync.sink_state import read_sink_state
from icebergsync.spec import IcebergSync
from icebergsync_operator.catalog_access import CatalogAccessError, describe_failure, open_guarded
from icebergsync_operator.kube import KubeApi, UnreadableSecretError
from icebergsync_operator.settings import OperatorSettings
from icebergsync_operator.status_update import TableObservation

log = logging.getLogger(__name__)


def _secret_values(api: KubeApi, sync: IcebergSync) -> dict[str, str]:
    """The catalog Secret's values, read only from the sync's own namespace."""
    ref = sync.spec.table.catalog.secret_ref
    if ref is None:
        return {}
    try:
        return api.read_secret(sync.metadata.namespace, ref.name)
    except ApiException as error:
        raise CatalogAccessError(f"cannot read Secret {ref.name!r} of the catalog in namespace "
                                 f"{sync.metadata.namespace}: {error.status} {error.reason}") from None
    except UnreadableSecretError as error:
        raise CatalogAccessError(str(error)) from None


def observe_table(api: KubeApi, sync: IcebergSync, settings: OperatorSettings) -> TableObservation:
    """The sink's state from the table; a missing table is no error (the first job creates it)."""
    catalog = sync.spec.table.catalog
    try:
        opened = open_guarded(catalog, _secret_values(api, sync), settings.catalog_timeout,
                              settings.allowed_catalog_uris)
        return TableObservation(sink=read_sink_state(opened, sync.spec.table.name, sync.sink_id))
    except (NoSuchTableError, NoSuchNamespaceError):
        return TableObservation()
    except CatalogAccessError as error:
        return TableObservation(error=str(error))
    except Exception as error:  # a catalog or FileIO error of any library: report it safely, keep reconciling
        log.warning("reading table %s for %s failed: %s", sync.spec.table.name, sync.sink_id, type(error).__name__)
        return TableObservation(error=describe_failure(error, catalog.uri, settings.catalog_timeout))
