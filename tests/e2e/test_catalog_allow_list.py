"""Tenants' catalogs under the admin's allow-list, with the real operator (docs/security.md rows 1 and 7).

With the chart's default, empty ``operator.allowedCatalogUris``, the operator contacts no IcebergCatalog
and no inline catalog: a probe server standing in for an internal service gets no request, a
``sqlite:`` catalog's file is never created, and the catalogs and their syncs say why
(``CatalogNotAllowed``). The controls: a ClusterIcebergCatalog (only the cluster admin declares one)
is checked under the empty list, and a listed endpoint is contacted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Kube, wait_for
from tests.e2e.test_catalog_resources import (
    StartOperator,
    catalog_ready,
    create_catalog,
    ready,
    ref_spec,
    stalled_with,
)
from tests.e2e.test_operator import generator_spec
from tests.hostile_servers import Listener, respond

CHART_CATALOGS = "--no-allow-local-catalogs"  # the chart's default, overriding the fixture's (inline stays allowed)
CONFIG = respond("200 OK", {"Content-Type": "application/json"}, b'{"defaults": {}, "overrides": {}}')
ADMIN = "the cluster admin must list it in operator.allowedCatalogUris"


def rest(uri: str) -> dict[str, Any]:
    return {"type": "rest", "uri": uri}


def refused(kube: Kube, name: str) -> str:
    """The message of a catalog resource's Ready condition once it is CatalogNotAllowed."""
    return wait_for(f"{name} CatalogNotAllowed", lambda: (lambda r: r[2] if r and r[1] == "CatalogNotAllowed" else None)(
        catalog_ready(kube, name)))


def stalled_message(kube: Kube, name: str) -> str:
    status = stalled_with(kube, name, "CatalogNotAllowed")
    return str(next(c["message"] for c in status["conditions"] if c["type"] == "Stalled"))


def test_with_the_default_empty_allow_list_no_tenant_catalog_is_contacted_nor_any_file_created(
        kube: Kube, start_operator: StartOperator, cluster_catalogs: Callable[[dict[str, Any]], str], tmp_path: Path) -> None:
    database = tmp_path / "x.db"
    with Listener(CONFIG) as probe, Listener(CONFIG) as admins:
        create_catalog(kube, "probe", rest(probe.url))
        create_catalog(kube, "file", {"type": "sql", "uri": f"sqlite:///{database}"})
        kube.create_sync("via-probe", ref_spec("probe"))
        kube.create_sync("via-file", ref_spec("file"))
        kube.create_sync("inline", generator_spec(rest(probe.url)))
        cluster = cluster_catalogs({**rest(admins.url), "namespaces": [kube.namespace]})
        operator = start_operator(CHART_CATALOGS)

        message = refused(kube, "probe")
        assert ADMIN in message and "while operator.allowedCatalogUris is empty" in message
        assert "--allow-local-catalogs" in refused(kube, "file")
        assert ADMIN in stalled_message(kube, "via-probe") and ADMIN in stalled_message(kube, "inline")
        assert "--allow-local-catalogs" in stalled_message(kube, "via-file")
        assert wait_for("the ClusterIcebergCatalog checked", lambda: (lambda r: r if r and r[0] == "True" else None)(
            ready(lambda: kube.custom.get_cluster_custom_object("icebergsync.io", "v1alpha1",
                                                                "clustericebergcatalogs", cluster))))[1] == "Connected"
        operator.wait_reconciles(9)  # every sync refreshed three times more (1 s timer)

        assert probe.connections == 0
        assert admins.connections >= 1
    assert not database.exists()
    assert kube.applications() == {}
    assert kube.event_reasons("via-probe") == ["CatalogNotAllowed"]


def test_a_listed_endpoint_is_contacted(kube: Kube, start_operator: StartOperator) -> None:
    with Listener(CONFIG) as probe:
        create_catalog(kube, "probe", rest(probe.url))
        start_operator(CHART_CATALOGS, "--allowed-catalog-uris", probe.url)
        assert wait_for("probe Ready", lambda: (lambda r: r if r and r[0] == "True" else None)(
            catalog_ready(kube, "probe")))[1] == "Connected"
        assert probe.connections >= 1
