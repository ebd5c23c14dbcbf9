"""The operator reads a SQL catalog's metadata file from S3 (MinIO on 127.0.0.1) itself: a SigV4 GET on
its bounded transport, signed with the tenant's keys only, to an allowed endpoint only."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from icebergsync_operator.catalog_access import CatalogAccessError
from icebergsync_operator.settings import OperatorSettings
from icebergsync_operator.table import read_metadata
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from icebergsync.catalog import ensure_table, open_catalog
from icebergsync.sink_state import sink_state
from icebergsync.spec import IcebergSync, parse_spec
from tests.infra.services import S3Server
from tests.unit.test_catalog_access import reach, tenant

SETTINGS = reach(OperatorSettings(catalog_timeout=10))


def sync_on(tmp_path: Path, s3_server: S3Server, properties: dict[str, str]) -> IcebergSync:
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
               "warehouse": f"s3://{s3_server.bucket}/operator-reads", "properties": properties}
    return parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                       "metadata": {"name": "trips", "namespace": "data"},
                       "spec": {"source": {"generator": {}}, "table": {"name": "db.trips", "catalog": catalog}}})


@pytest.fixture
def table_on_s3(tmp_path: Path, s3_server: S3Server) -> IcebergSync:
    """A table of three rows in a SQLite catalog whose warehouse is on S3, written as the job writes it."""
    sync = sync_on(tmp_path, s3_server, s3_server.fileio_properties)
    table = ensure_table(open_catalog(sync.spec.table.catalog_or_default), "db.trips",
                         Schema(NestedField(1, "id", LongType(), required=False)), [], {})
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    return sync


def test_the_operator_reads_s3_metadata_with_the_keys_of_the_syncs_secret(
        table_on_s3: IcebergSync, tmp_path: Path, s3_server: S3Server) -> None:
    keys = {"s3.access-key-id": s3_server.access_key, "s3.secret-access-key": s3_server.secret_key}
    spec_only = sync_on(tmp_path, s3_server, {"s3.endpoint": s3_server.endpoint, "s3.region": s3_server.region})
    metadata = read_metadata(spec_only, keys, SETTINGS)
    assert sink_state(metadata, "db.trips", "data/trips").total_records == 3
    allowed = tenant(OperatorSettings(catalog_timeout=10, allow_local_catalogs=True,
                                      allowed_catalog_uris=(f"{s3_server.endpoint}/{s3_server.bucket}",)))
    assert read_metadata(spec_only, keys, allowed).current_snapshot() is not None


def test_the_operators_own_credentials_never_sign_a_tenants_read(
        table_on_s3: IcebergSync, tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    keyless = sync_on(tmp_path, s3_server, {"s3.endpoint": s3_server.endpoint})
    with pytest.raises(CatalogAccessError) as refused:
        read_metadata(keyless, {}, SETTINGS)
    assert str(refused.value) == f"catalog at sqlite:///{tmp_path / 'catalog.db'} returned HTTP 403"


def test_an_s3_endpoint_or_bucket_outside_the_allow_list_is_never_contacted(
        table_on_s3: IcebergSync, tmp_path: Path, s3_server: S3Server) -> None:
    other_bucket = tenant(OperatorSettings(catalog_timeout=10, allow_local_catalogs=True,
                                           allowed_catalog_uris=(f"{s3_server.endpoint}/elsewhere",)))
    with pytest.raises(CatalogAccessError, match=f"{s3_server.endpoint}/{s3_server.bucket}/operator-reads/.* is not "
                                                 "among the endpoints"):
        read_metadata(table_on_s3, {}, other_bucket)
    no_endpoint = sync_on(tmp_path, s3_server, {})
    with pytest.raises(CatalogAccessError, match=r"https://s3\.us-east-1\.amazonaws\.com/.* is not among the endpoints"):
        read_metadata(no_endpoint, {}, other_bucket)
