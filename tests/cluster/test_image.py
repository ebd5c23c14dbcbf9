"""The image, built for real (scripts/infra/image.sh) and run in the project's Docker engine: what
it contains, who it runs as, and a sync job run inside it with no network at all."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import yaml
from icebergsync_operator.constants import MAIN_APPLICATION_FILE
from packaging.utils import canonicalize_name

from icebergsync import protocol
from icebergsync.catalog import open_catalog
from icebergsync.spec import load_spec
from tests.infra.image import BuiltImage

REPO_ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def project_version() -> str:
    return str(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_version_inside(icebergsync_image: BuiltImage) -> None:
    out = icebergsync_image.run("icebergsync", "--version").stdout.strip()
    assert re.fullmatch(
        rf"icebergsync {re.escape(project_version())} \(pyspark {re.escape(metadata.version('pyspark'))}, "
        r"Python 3\.11\.\d+\)", out), out


def test_tini_is_pid_1_and_the_user_is_spark_185(icebergsync_image: BuiltImage) -> None:
    out = icebergsync_image.run("sh", "-c", "cat /proc/1/comm; id -u; id -g; id -un").stdout.split()
    assert out == ["tini", "185", "185", "spark"]


def test_the_venv_holds_exactly_the_lock(icebergsync_image: BuiltImage) -> None:
    frozen = icebergsync_image.run("pip", "freeze").stdout.splitlines()
    installed = {canonicalize_name(name): version for name, version in PIN.findall("\n".join(frozen))}
    locked = {canonicalize_name(name): version for name, version in PIN.findall((REPO_ROOT / "requirements.lock").read_text())}
    assert installed == locked
    # Besides the lock only the project, installed from its wheel.
    (project,) = [line for line in frozen if not PIN.match(line)]
    assert re.fullmatch(rf"icebergsync @ file:///\S+/icebergsync-{re.escape(project_version())}-py3-none-any\.whl", project)
    icebergsync_image.run("pip", "check")


def test_spark_jars_are_exactly_pysparks(icebergsync_image: BuiltImage) -> None:
    """No Spark connector is baked in: the job reads Kafka with confluent-kafka and files and tables
    through pyiceberg's FileIO (the cluster tier's syncs run on this image)."""
    in_image = set(icebergsync_image.run("sh", "-c", 'ls "$SPARK_HOME/jars"').stdout.split())
    pyspark_jars = {p.name for p in Path(str(metadata.distribution("pyspark").locate_file("pyspark/jars"))).iterdir()}
    assert in_image == pyspark_jars


def test_a_sync_runs_inside_through_the_driver_entrypoint_without_network(
        icebergsync_image: BuiltImage, tmp_path: Path) -> None:
    """The path the Spark Operator's driver pod takes (`driver` -> spark-submit of mainApplicationFile),
    with a local master: generator -> SQLite catalog and warehouse in a mounted directory. With no network
    the container's hostname does not resolve, so Spark is told its address (a pod's does resolve)."""
    work = tmp_path / "job"
    work.mkdir()
    work.chmod(0o777)  # written by uid 185 inside
    spec_path = work / "sync.yaml"
    spec_path.write_text(yaml.safe_dump({
        "apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "metadata": {"name": "in-image"},
        "spec": {
            "source": {"generator": {"rowsPerSecond": 5000, "totalRows": 3000, "maxRowsPerTrigger": 1000}},
            "table": {"catalog": {"type": "sql", "uri": f"sqlite:///{work}/catalog.db", "warehouse": str(work / "wh")},
                      "name": "demo.trips"},
            "commit": {"interval": "1s"},
        },
    }))
    icebergsync_image.run(
        "driver", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
        MAIN_APPLICATION_FILE.removeprefix("local://"), "run", str(spec_path), "--sink-version", "1", "--master", "",
        volumes=[work], env={"SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1", "SPARK_LOCAL_IP": "127.0.0.1"}, timeout=900)

    table = open_catalog(load_spec(spec_path).spec.table.catalog_or_default).load_table("demo.trips")
    ids = sorted(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())
    assert ids == list(range(3000)), "every generated row exactly once"
    commits = [c for c in map(protocol.parse_commit, protocol.main_ancestry(table.metadata)) if c is not None]
    assert commits and {c.writer.version for c in commits} == {1}
    assert sum(c.records for c in commits) == 3000
