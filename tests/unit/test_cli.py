"""The command line: invalid specs and unreachable catalogs fail fast with a clear message and status."""

from __future__ import annotations

import logging
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from icebergsync.errors import EXIT_CATALOG_UNREACHABLE, EXIT_INVALID_SPEC
from spark_app.cli import main


def write(tmp_path: Path, spec: dict[str, object]) -> str:
    path = tmp_path / "sync.yaml"
    document = {"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "metadata": {"name": "s"}, "spec": spec}
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_invalid_spec_lists_every_problem_and_exits_2(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spec = {"source": {"generator": {"rowsPerSecond": 0}}, "table": {"name": "x"}, "commit": {"interval": "soon"}}
    with caplog.at_level(logging.ERROR):
        assert main(["run", write(tmp_path, spec)]) == EXIT_INVALID_SPEC
    text = caplog.text
    assert "spec.source.generator.rowsPerSecond" in text
    assert "spec.table.name" in text
    assert "spec.commit.interval" in text


def test_unreachable_catalog_exits_4_naming_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spec = {"source": {"generator": {}},
            "table": {"name": "a.b", "catalog": {"type": "rest", "uri": "http://127.0.0.1:9", "warehouse": "w"}}}
    with caplog.at_level(logging.ERROR):
        assert main(["run", write(tmp_path, spec)]) == EXIT_CATALOG_UNREACHABLE
        assert main(["status", write(tmp_path, spec)]) == EXIT_CATALOG_UNREACHABLE
    assert "http://127.0.0.1:9 is unreachable" in caplog.text


def test_missing_secret_and_env_are_spec_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEBERGSYNC_SECRETS_DIR", str(tmp_path / "secrets"))
    monkeypatch.delenv("NO_SUCH_VARIABLE", raising=False)
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": str(tmp_path / "w"),
               "properties": {"token": "${env:NO_SUCH_VARIABLE}"}, "secretRef": {"name": "creds"}}
    with caplog.at_level(logging.ERROR):
        assert main(["run", write(tmp_path, {"source": {"generator": {}}, "table": {"name": "a.b", "catalog": catalog}})]) \
            == EXIT_INVALID_SPEC
    assert "spec.table.catalog.properties.token: environment variable NO_SUCH_VARIABLE is not set" in caplog.text
    assert f"secretRef 'creds': the Secret is not mounted at {tmp_path / 'secrets' / 'creds'}" in caplog.text


def test_version_names_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == (
        f"icebergsync {metadata.version('icebergsync')} (pyspark {metadata.version('pyspark')}, "
        f"Python {'.'.join(map(str, sys.version_info[:3]))})")


def test_the_cli_refuses_what_the_crd_refuses(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    spec = {"source": {"generator": {}}, "table": {"name": "db.t"}, "commit": {"pollInterval": "0s"}}
    with caplog.at_level(logging.ERROR):
        assert main(["run", write(tmp_path, spec)]) == EXIT_INVALID_SPEC
    assert "pollInterval must be greater than zero" in caplog.text
    for version in ("-5", "0", "x"):
        with pytest.raises(SystemExit) as exited:
            main(["run", write(tmp_path, spec), "--sink-version", version])
        assert exited.value.code == 2
        assert "--sink-version" in capsys.readouterr().err


def test_huge_input_is_not_echoed_whole_in_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    huge = "x" * 100_000
    spec = {"source": {"generator": {}}, "table": {"name": huge}, "commit": {"interval": huge}}
    with caplog.at_level(logging.ERROR):
        assert main(["run", write(tmp_path, spec)]) == EXIT_INVALID_SPEC
    assert "spec.table.name" in caplog.text and "spec.commit.interval" in caplog.text
    assert "(100002 characters)" in caplog.text
    assert len(caplog.text) < 2_000
    with pytest.raises(SystemExit):
        main(["run", write(tmp_path, spec), "--sink-version", huge])
    assert len(capsys.readouterr().err) < 2_000
