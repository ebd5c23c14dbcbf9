"""A ``sql`` catalog on a real PostgreSQL (Debian's postgresql, started on 127.0.0.1 for this module,
stopped after it): the job's catalog access writes and reads a table through the psycopg2 driver,
the operator's guarded access reads the sink's state, and a server that is down is reported without
the URI's password."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
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

POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
SERVER_MAX_SECONDS = 600
PASSWORD = "pg-secret-31"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres(*args: str) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args]


@pytest.fixture(scope="module")
def postgres_uri() -> Iterator[str]:
    """``postgresql://icebergsync:…@127.0.0.1:<port>/postgres`` of a fresh server (bounded lifetime)."""
    if not (POSTGRES_BIN / "postgres").is_file() or os.geteuid() != 0:
        pytest.fail("needs Debian's postgresql (apt-get install postgresql) and root to run it as user postgres")
    root = Path(tempfile.mkdtemp(prefix="icebergsync-pg-"))
    data = root / "data"
    owner = pwd.getpwnam("postgres")
    os.chown(root, owner.pw_uid, owner.pw_gid)
    password_file = root / "password"
    password_file.write_text(PASSWORD)
    os.chown(password_file, owner.pw_uid, owner.pw_gid)
    subprocess.run(_as_postgres(str(POSTGRES_BIN / "initdb"), "-D", str(data), "-U", "icebergsync",
                                "--auth=scram-sha-256", f"--pwfile={password_file}"),
                   check=True, capture_output=True, timeout=120)
    port = _free_port()
    server = subprocess.Popen(_as_postgres("timeout", str(SERVER_MAX_SECONDS), str(POSTGRES_BIN / "postgres"),
                                           "-D", str(data), "-h", "127.0.0.1", "-p", str(port), "-k", str(root)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"postgresql://icebergsync:{PASSWORD}@127.0.0.1:{port}/postgres"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg2.connect(host="127.0.0.1", port=port, user="icebergsync", password=PASSWORD,
                                 dbname="postgres", connect_timeout=2).close()
                break
            except psycopg2.OperationalError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"PostgreSQL did not start on port {port}")
                time.sleep(0.3)
        yield uri
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=30)
        if server.poll() is None:
            os.killpg(server.pid, 9)
        shutil.rmtree(root, ignore_errors=True)


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
    metadata = read_metadata(sync_on(catalog), {}, OperatorSettings(catalog_timeout=5))
    state = sink_state(metadata, "db.trips", "data/trips")
    assert state.total_records == 3
    assert state.snapshot_id is None  # no snapshot of this sink: the append was not a sink commit


def test_a_postgres_that_is_down_is_reported_without_the_password(tmp_path: Path) -> None:
    down = f"postgresql://icebergsync:{PASSWORD}@127.0.0.1:{_free_port()}/postgres"
    with pytest.raises(CatalogAccessError) as refused:
        read_metadata(sync_on(Catalog(type="sql", uri=down, warehouse=str(tmp_path))), {},
                      OperatorSettings(catalog_timeout=2))
    assert PASSWORD not in str(refused.value)
    assert "failed (OperationalError)" in str(refused.value)
