"""A ``sql`` catalog on a real PostgreSQL (Debian's postgresql, started on 127.0.0.1 for this module,
stopped after it): the job's catalog access writes and reads a table through the psycopg2 driver,
the operator's guarded access reads the sink's state, and a server that is down is reported without
the URI's password."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from icebergsync_operator.catalog_access import CatalogAccessError
from icebergsync_operator.settings import OperatorSettings
from icebergsync_operator.table import read_metadata
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from icebergsync.catalog import ensure_table, open_catalog
from icebergsync.sink_state import sink_state
from icebergsync.spec import Catalog, IcebergSync, parse_spec
from tests.infra.postgres import PASSWORD, free_port
from tests.unit.test_catalog_access import reach

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


def sync_on(catalog: Catalog) -> IcebergSync:
    return parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                       "metadata": {"name": "trips", "namespace": "data"},
                       "spec": {"source": {"generator": {}},
                                "table": {"name": "db.trips", "catalog": catalog.model_dump(by_alias=True, exclude_none=True)}}})


def test_the_job_and_the_operator_use_a_sql_catalog_on_postgres(postgres_uri: str, tmp_path: Path) -> None:
    catalog = Catalog(type="sql", uri=postgres_uri, warehouse=str(tmp_path / "warehouse"))
    table = ensure_table(open_catalog(catalog), "db.trips", SCHEMA, [], {})
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}))

    reread = open_catalog(catalog).load_table("db.trips")
    assert sorted(reread.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    metadata = read_metadata(sync_on(catalog), {}, reach(OperatorSettings(catalog_timeout=5)))
    state = sink_state(metadata, "db.trips", "data/trips")
    assert state.total_records == 3
    assert state.snapshot_id is None  # no snapshot of this sink: the append was not a sink commit


def test_a_postgres_that_is_down_is_reported_without_the_password(tmp_path: Path) -> None:
    down = f"postgresql://icebergsync:{PASSWORD}@127.0.0.1:{free_port()}/postgres"
    with pytest.raises(CatalogAccessError) as refused:
        read_metadata(sync_on(Catalog(type="sql", uri=down, warehouse=str(tmp_path))), {},
                      reach(OperatorSettings(catalog_timeout=2)))
    assert PASSWORD not in str(refused.value)
    assert "failed (OperationalError)" in str(refused.value)
