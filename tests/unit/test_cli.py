"""The command line: invalid specs, unreadable files, unreachable catalogs, a table another sink writes and a
warehouse it cannot write fail fast with one clear line and a documented status."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from icebergsync import cli, protocol
from icebergsync.catalog import open_catalog
from icebergsync.errors import (
    EXIT_CATALOG_UNREACHABLE,
    EXIT_FAILED,
    EXIT_INVALID_SPEC,
    EXIT_TABLE_IN_USE,
    FencedError,
)
from icebergsync.launch_check import check_launch
from icebergsync.protocol import Writer
from icebergsync.spec import load_spec
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
    assert "pollInterval must be a duration greater than zero" in caplog.text
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


# A sync on a real SQLite catalog and local warehouse under tmp_path (the generator: nothing else to reach).
def local_sync(tmp_path: Path, name: str = "s", **spec: object) -> str:
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": str(tmp_path / "warehouse")}
    body = {"source": {"generator": {"totalRows": 10}}, "table": {"name": "demo.trips", "catalog": catalog}, **spec}
    document = {"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "metadata": {"name": name},
                "spec": body}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def committed_by(spec_path: str, sink_id: str, version: int) -> None:
    """A commit of ``sink_id`` at ``version`` on the spec's table (created when missing), as a sink writes it."""
    sync = load_spec(spec_path)
    catalog = open_catalog(sync.spec.table.catalog_or_default)
    catalog.create_namespace_if_not_exists("demo")
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    table = catalog.create_table_if_not_exists(sync.spec.table.name, schema)
    table.append(pa.table({"id": pa.array([1], pa.int64())}),
                 snapshot_properties=protocol.CommitStatement(Writer(sink_id, version, "a"), "data", {"next_id": 1}).properties())


def test_run_refuses_a_table_another_sink_writes_naming_it(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    spec = local_sync(tmp_path, "second")
    committed_by(spec, "default/first", 1)
    with caplog.at_level(logging.ERROR):
        assert main(["run", spec]) == EXIT_TABLE_IN_USE
        assert main(["run", spec, "--sink-version", "5"]) == EXIT_TABLE_IN_USE
    [line, _] = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert "\n" not in line and "table demo.trips is written by sink default/first, not default/second" in line
    assert "spec.sinkId first (or metadata.name first)" in line
    assert sink_ids(spec) == ["default/first"], "nothing was written"
    assert main(["status", spec]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(
        "WARNING: table demo.trips is written by sink default/first, not default/second")


def sink_ids(spec_path: str) -> list[str | None]:
    sync = load_spec(spec_path)
    table = open_catalog(sync.spec.table.catalog_or_default).load_table(sync.spec.table.name)
    return [snapshot.summary.additional_properties.get(protocol.SINK_ID) if snapshot.summary else None
            for snapshot in table.snapshots()]


def test_the_launch_version_follows_the_tables_newest_unless_given(tmp_path: Path) -> None:
    spec = local_sync(tmp_path)
    sync = load_spec(spec)
    catalog = open_catalog(sync.spec.table.catalog_or_default)
    assert check_launch(catalog, sync, None) == 1, "a new table"
    committed_by(spec, sync.sink_id, 3)
    assert check_launch(catalog, sync, None) == 4
    assert check_launch(catalog, sync, 2) == 2, "an explicit version wins (the fence then decides)"
    assert cli.run_arguments("/s.yaml", 7) == ["run", "/s.yaml", "--sink-version", "7", "--master", ""]


def test_fenced_names_the_owner_and_how_to_take_over() -> None:
    message = str(FencedError("default/s", 1, 2, "b"))
    assert message == ("sink default/s version 1 stops without writing: version 2 (attempt b) owns the table; to take "
                       "it over, run without --sink-version (the next version) or with --sink-version 3 or higher")


NOBODY = 65534  # uid and gid


def cli_process(*argv: str, user: int | None = None) -> subprocess.CompletedProcess[str]:
    """The installed ``icebergsync`` program (as ``user``, by setpriv, when given)."""
    program = [str(Path(sys.executable).parent / "icebergsync"), *argv]
    if user is not None:
        program = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *program]
    return subprocess.run(program, capture_output=True, text=True, timeout=120, check=False)


def last_line_of(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    return result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("command", ["run", "status", "validate"])
def test_a_spec_file_that_cannot_be_read_is_one_line_and_status_2(tmp_path: Path, command: str) -> None:
    missing = cli_process(command, str(tmp_path / "nope.yaml"))
    assert missing.returncode == EXIT_INVALID_SPEC
    assert last_line_of(missing).endswith(f"cannot read the spec file {tmp_path / 'nope.yaml'}: no such file or "
                                          "directory; give the path of an IcebergSync YAML file "
                                          "(examples/quickstart.yaml is one)")
    assert cli_process(command, str(tmp_path)).returncode == EXIT_INVALID_SPEC, "a directory"


def test_invalid_yaml_names_the_line_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kind: IcebergSync\nspec:\n  a: b\n c: d\n")
    result = cli_process("run", str(path))
    assert result.returncode == EXIT_INVALID_SPEC
    assert f"{path}: not valid YAML at line 4, column 2: " in last_line_of(result)


def test_status_before_the_first_run_says_run_first(tmp_path: Path) -> None:
    spec = local_sync(tmp_path)
    result = cli_process("status", spec)
    assert result.returncode == EXIT_FAILED
    assert last_line_of(result).endswith(f"no table yet: demo.trips does not exist in the catalog; run first "
                                         f"(icebergsync run {spec})")


def test_a_read_only_warehouse_is_named() -> None:
    # /tmp, not pytest's tmp_path: a directory another user can reach (root runs the program as nobody, for
    # whom permissions count)
    root = Path(tempfile.mkdtemp(prefix="isync-ro-"))
    try:
        (root / "read-only").mkdir(mode=0o555)
        (root / "read-only").chmod(0o555)
        (root / "catalog").mkdir()
        for directory in (root, root / "catalog"):
            directory.chmod(0o777)
        catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog/c.db", "warehouse": str(root / "read-only/wh")}
        spec = root / "s.yaml"
        spec.write_text(yaml.safe_dump({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync",
                                        "metadata": {"name": "s"}, "spec": {
                                            "source": {"generator": {}}, "table": {"name": "d.t", "catalog": catalog}}}))
        spec.chmod(0o644)
        result = cli_process("run", str(spec), user=NOBODY if os.geteuid() == 0 else None)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert result.returncode == EXIT_FAILED
    assert last_line_of(result).endswith(f"permission denied on {root}/read-only/wh: give this user access to it "
                                         "(a warehouse it cannot write: make it writable, or point "
                                         "spec.table.catalog.warehouse at a directory it can write)")


@pytest.mark.parametrize(("argv", "said"), [
    (["run", "s.yaml", "--conf", "spark.driver.memory"], "argument --conf: 'spark.driver.memory' is not KEY=VALUE"),
    (["--log-level", "loud", "status", "s.yaml"], "argument --log-level: invalid choice: 'LOUD'"),
])
def test_usage_errors_are_argparse_errors(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def test_log_level_is_case_insensitive(tmp_path: Path) -> None:
    assert main(["--log-level", "debug", "validate", local_sync(tmp_path)]) == 0


def test_validate_checks_the_spec_and_the_catalog_without_running(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    spec = local_sync(tmp_path)
    assert main(["validate", spec]) == 0
    assert capsys.readouterr().out == (f"valid: sink default/s, generator source into demo.trips (sql catalog at "
                                       f"sqlite:///{tmp_path}/catalog.db answers)\n")
    assert not open_catalog(load_spec(spec).spec.table.catalog_or_default).table_exists("demo.trips")
    bad = {"source": {"generator": {"rowsPerSecond": 0}}, "table": {"name": "x"},
           "schema": [{"name": "id", "type": "integer"}]}
    unreachable = {"source": {"generator": {}},
                   "table": {"name": "a.b", "catalog": {"type": "rest", "uri": "http://127.0.0.1:9", "warehouse": "w"}}}
    with caplog.at_level(logging.ERROR):
        assert main(["validate", write(tmp_path, bad)]) == EXIT_INVALID_SPEC
        assert main(["validate", write(tmp_path, unreachable)]) == EXIT_CATALOG_UNREACHABLE
    assert "spec.source.generator.rowsPerSecond" in caplog.text and "spec.table.name" in caplog.text
    assert "spec.schema[0].type" in caplog.text and "http://127.0.0.1:9 is unreachable" in caplog.text


def test_a_bad_column_type_lists_the_valid_types(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spec = {"source": {"files": {"path": "/in"}}, "table": {"name": "a.b"},
            "schema": [{"name": "id", "type": "integer"}, {"name": "tags", "type": "list<string>"}]}
    with caplog.at_level(logging.ERROR):
        assert main(["validate", write(tmp_path, spec)]) == EXIT_INVALID_SPEC
    for index, given in enumerate(("integer", "list<string>")):
        assert (f"spec.schema[{index}].type: type must be one of boolean, int, long, float, double, string, binary, "
                f"date, timestamp, timestamptz, decimal(p,s), array<T>, map<K, V> or struct<name: T, ...> (e.g. "
                f"array<string>, struct<id: long not null, tags: array<string>>) (got '{given}')") in caplog.text
    assert "must match" not in caplog.text
