"""Where the operator may go for a catalog (``CatalogScope``) and how much memory its reads may take
(``MemoryBudget``): the allow-list per who declared the catalog, local files (never in a pod), and the
budget's charge, reserve and release."""

from __future__ import annotations

import pytest
from icebergsync_operator import main
from icebergsync_operator.catalog_memory import BYTES_CHARGED, SMALL_READ, MemoryBudget, TooLarge
from icebergsync_operator.catalog_scope import CatalogNotAllowed, CatalogScope
from icebergsync_operator.endpoints import parse_endpoint

from icebergsync.spec import Catalog

ADMIN = "operator.allowedCatalogUris"


def test_an_empty_allow_list_admits_only_catalogs_the_cluster_admin_declared() -> None:
    tenant, cluster = CatalogScope((), False, False), CatalogScope((), True, False)
    catalog = Catalog(type="rest", uri="http://169.254.169.254/latest")
    refusal = tenant.refusal(catalog)
    assert refusal is not None and "while operator.allowedCatalogUris is empty" in refusal and ADMIN in refusal
    with pytest.raises(CatalogNotAllowed, match=ADMIN):
        tenant.check(parse_endpoint("http://catalog.internal"))
    assert cluster.refusal(catalog) is None
    cluster.check(parse_endpoint("http://catalog.internal"))
    postgres = Catalog(type="sql", uri="postgresql://u:secret@db.internal/cat")
    refusal = tenant.refusal(postgres)
    assert refusal is not None and "secret" not in refusal


@pytest.mark.parametrize("admin_declared", [False, True])
def test_a_set_allow_list_binds_every_catalog_on_host_port_and_path_segments(admin_declared: bool) -> None:
    scope = CatalogScope(("https://catalog.internal/api",), admin_declared, False)
    assert scope.refusal(Catalog(type="rest", uri="HTTPS://Catalog.Internal:443/api/v1")) is None
    for uri in ("https://catalog.internal/apiv2", "https://catalog.internal.evil/api", "https://catalog.internal:8443/api"):
        refusal = scope.refusal(Catalog(type="rest", uri=uri))
        assert refusal is not None and refusal.startswith(f"{uri} is not among the endpoints") and ADMIN in refusal


def test_local_files_are_opened_only_with_allow_local_catalogs() -> None:
    for scope in (CatalogScope((), True, False), CatalogScope(("http://catalog.internal",), False, False)):
        refusal = scope.refusal(Catalog(type="sql", uri="sqlite:////tmp/x.db"))
        assert refusal is not None and "--allow-local-catalogs" in refusal
        with pytest.raises(CatalogNotAllowed, match="is a local file"):
            scope.check_local("table metadata /etc/passwd")
    local = CatalogScope((), False, True)
    assert local.refusal(Catalog(type="sql", uri="sqlite:////tmp/x.db")) is None
    local.check_local("table metadata /tmp/v1.metadata.json")


def test_an_ambiguous_uri_is_left_to_the_policy() -> None:
    assert CatalogScope((), False, False).refusal(Catalog(type="rest", uri="http://a\\@b/")) is None


def test_reads_are_charged_for_their_last_two_bodies_beyond_the_reserve_and_give_everything_back() -> None:
    budget = MemoryBudget(total=2 * 1024**2 * BYTES_CHARGED, max_reads=2)
    assert budget.reserve == 2 * SMALL_READ * BYTES_CHARGED
    share = budget.share(body_limit=1024**2)
    share.start_body()
    share.charge(SMALL_READ)  # within the reserve
    assert budget.taken == 0
    share.charge(1000)
    assert budget.taken == 1000 * BYTES_CHARGED
    share.start_body()
    share.charge(10)
    share.start_body()  # the first body is no longer charged
    assert budget.taken == 0
    share.charge(SMALL_READ + 1)
    assert budget.taken == 11 * BYTES_CHARGED
    share.release()
    assert budget.taken == 0


def test_a_read_over_the_budget_fails_at_once_and_a_small_read_still_fits() -> None:
    budget = MemoryBudget(total=(2 * SMALL_READ + 100_000) * BYTES_CHARGED, max_reads=2)
    large, other = budget.share(1024**2), budget.share(1024**2)
    large.start_body()
    large.charge(SMALL_READ + 100_000)  # the whole shared pool
    other.start_body()
    other.charge(SMALL_READ)  # a small read: from the reserve
    with pytest.raises(TooLarge, match="memory for catalog reads"):
        other.charge(1)
    large.release()
    other.charge(1)
    assert budget.taken == BYTES_CHARGED


def test_the_operator_will_not_open_local_catalogs_in_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(main, "load_api_client", lambda: (object(), True))  # in-cluster credentials loaded
    assert main.main(["--allow-local-catalogs", "--standalone"]) == 1
