"""The files source on S3 (MinIO): listed and read through pyarrow's S3 filesystem, both with the
endpoint from the spec and the credentials from a mounted Secret, never from the spec text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.infra.services import S3Server
from tests.integration.sync_support import (
    catalog_of,
    make_sync,
    run_job_process,
    sync_document,
    table_ids,
    write_spec,
)


def test_json_files_on_s3_are_ingested_once_with_secret_credentials(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    filesystem = s3_server.filesystem()
    inbox = f"{s3_server.bucket}/files-inbox"
    for name, ids in [("2026-01-01.json", range(0, 30)), ("2026-01-02.json", range(30, 45))]:
        with filesystem.open_output_stream(f"{inbox}/{name}") as out:
            out.write("\n".join(json.dumps({"id": i, "note": f"n{i}"}) for i in ids).encode())
    secrets = tmp_path / "secrets" / "minio-credentials"
    secrets.mkdir(parents=True)
    (secrets / "s3.access-key-id").write_text(s3_server.access_key)
    (secrets / "s3.secret-access-key").write_text(s3_server.secret_key)
    monkeypatch.setenv("ICEBERGSYNC_SECRETS_DIR", str(tmp_path / "secrets"))
    source = {"files": {"path": f"s3a://{inbox}", "format": "json", "secretRef": {"name": "minio-credentials"}}}
    endpoint = {"s3.endpoint": s3_server.endpoint, "s3.region": s3_server.region, "s3.path-style-access": "true"}
    extra = {
        "schema": [{"name": "id", "type": "long", "required": True}, {"name": "note", "type": "string"}],
        "table": {"catalog": {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
                              "warehouse": str(tmp_path / "warehouse"), "properties": endpoint},
                  "name": "sales.orders"},
    }
    document = sync_document(tmp_path, source, **extra)
    assert not {s3_server.secret_key, s3_server.access_key} & set(_leaf_strings(document)), "keys leaked into the spec"
    spec_path = write_spec(tmp_path, document)
    catalog = catalog_of(make_sync(tmp_path, source, **extra))
    status, log = run_job_process(spec_path, 1, stop_when=lambda: table_ids(catalog.load_table("sales.orders")) == list(range(45)))
    assert status == 0, log[-3000:]
    with filesystem.open_output_stream(f"{inbox}/2026-01-03.json") as out:
        out.write(json.dumps({"id": 45, "note": "late"}).encode())
    status, log = run_job_process(spec_path, 2, stop_when=lambda: table_ids(catalog.load_table("sales.orders")) == list(range(46)))
    assert status == 0, log[-3000:]
    assert table_ids(catalog.load_table("sales.orders")) == list(range(46))


def _leaf_strings(value: object) -> list[str]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaf_strings(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaf_strings(item)]
    return [value] if isinstance(value, str) else []
