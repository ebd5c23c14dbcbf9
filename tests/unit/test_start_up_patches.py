"""What the product patches in its dependencies is patched by an explicit call at start-up, never by an import:
pyiceberg's v3 table metadata writer (by the job) and the zip importers' cache check (by the worker daemon)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import zipimport
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadataV3
from pyiceberg.types import LongType, NestedField

from icebergsync.spec import parse_spec
from spark_app import worker_daemon
from spark_app.iceberg import internals
from spark_app.job.loop import SyncJob

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Schema(NestedField(1, "id", LongType(), required=True))

IMPORT_EVERYTHING = """
import importlib, pkgutil, zipimport
from pyiceberg.table.metadata import TableMetadataV3
before = (TableMetadataV3.model_dump_json, zipimport.zipimporter.invalidate_caches)
for package in ("icebergsync", "spark_app"):
    for module in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        importlib.import_module(module.name)
print(before == (TableMetadataV3.model_dump_json, zipimport.zipimporter.invalidate_caches))
"""


def test_importing_every_module_of_the_core_and_the_data_plane_patches_nothing() -> None:
    result = subprocess.run([sys.executable, "-c", IMPORT_EVERYTHING], cwd=ROOT, capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["True"]


def v3_table_json(directory: Path) -> dict[str, object]:
    directory.mkdir(exist_ok=True)
    catalog = SqlCatalog("t", uri=f"sqlite:///{directory}/c.db", warehouse=(directory / "w").as_uri())
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.v3", SCHEMA, properties={"format-version": "3"})
    return json.loads(table.metadata.model_dump_json())


@pytest.fixture
def pyiceberg_as_shipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyiceberg's own v3 metadata writer for the test (put back after it)."""
    monkeypatch.setattr(TableMetadataV3, "model_dump_json", internals._pyiceberg_v3_metadata_json)


@pytest.mark.usefixtures("pyiceberg_as_shipped")
def test_the_call_installs_the_v3_metadata_writer_and_a_second_call_changes_nothing(tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError, match="Writing V3 is not yet supported"):
        v3_table_json(tmp_path / "before")
    internals.install_v3_metadata_writer()
    internals.install_v3_metadata_writer()
    written = v3_table_json(tmp_path / "after")
    assert written["format-version"] == 3 and written["next-row-id"] == 0


@pytest.mark.usefixtures("pyiceberg_as_shipped")
def test_a_job_installs_the_v3_metadata_writer_when_it_is_made(tmp_path: Path) -> None:
    sync = parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                       "metadata": {"name": "trips", "namespace": "team-a"},
                       "spec": {"source": {"generator": {}}, "table": {"name": "db.trips"}}})
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/job.db", warehouse=(tmp_path / "job").as_uri())
    SyncJob(sync, 1, lambda: pytest.fail("no session is needed"), catalog, threading.Event())  # type: ignore[arg-type,return-value]
    assert v3_table_json(tmp_path)["next-row-id"] == 0


def test_the_daemons_start_up_puts_the_check_in_place_of_zipimporters_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", zipimport.zipimporter.invalidate_caches)
    worker_daemon.reread_archives_only_when_changed()
    worker_daemon.reread_archives_only_when_changed()
    assert zipimport.zipimporter.invalidate_caches is worker_daemon.invalidate_when_changed
