"""The Dockerfile and the image's entrypoint, checked without building (tests/cluster/test_image.py
builds and runs the image).

Checked here: every file it copies from the build context exists and passes .dockerignore; every
stage starts from the BASE_IMAGE argument (public debian:bookworm-slim by default) or an earlier
stage; its pins agree with the project's (Python line, Spark = the venv's pyspark with its own jars
only, the lock and the build backend are installed with hashes); the entry points it and the chart name exist and start; the final user is uid 185;
tini is PID 1; docker/entrypoint.sh maps the Spark Operator's `driver` / `executor` calls.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from icebergsync_operator.constants import MAIN_APPLICATION_FILE
from packaging.requirements import Requirement

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
ENTRYPOINT = REPO_ROOT / "docker" / "entrypoint.sh"
VENV = "/opt/icebergsync/venv"
PYTHON_LINE = f"python{sys.version_info[0]}.{sys.version_info[1]}"


# ------------------------------------------------------------------------------------------------
# a small Dockerfile reader
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    stage: int  #: index of the FROM this instruction belongs to (-1: global ARGs)
    keyword: str
    args: str

    def words(self) -> list[str]:
        return shlex.split(self.args)


def instructions() -> list[Instruction]:
    logical: list[str] = []
    buffer = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        logical.append(buffer + stripped)
        buffer = ""
    assert not buffer, "Dockerfile ends inside a continued line"
    result, stage = [], -1
    for line in logical:
        keyword, _, args = line.partition(" ")
        if keyword.upper() == "FROM":
            stage += 1
        result.append(Instruction(stage, keyword.upper(), args.strip()))
    return result


def stages() -> list[tuple[str, str | None]]:
    """(image, alias) of each FROM, as written."""
    result = []
    for i in instructions():
        if i.keyword == "FROM":
            words = i.words()
            result.append((words[0], words[2] if len(words) >= 3 and words[1].upper() == "AS" else None))
    return result


def final_stage() -> int:
    return len(stages()) - 1


def of_stage(keyword: str, stage: int) -> list[Instruction]:
    return [i for i in instructions() if i.keyword == keyword and i.stage == stage]


def stage_index(alias: str) -> int:
    return [a for _, a in stages()].index(alias)


def copies() -> Iterator[tuple[Instruction, list[str], str, dict[str, str]]]:
    """Every COPY: (instruction, sources, destination, --flags)."""
    for i in instructions():
        if i.keyword != "COPY":
            continue
        words = i.words()
        flags = {}
        while words[0].startswith("--"):
            key, _, value = words.pop(0)[2:].partition("=")
            flags[key] = value
        yield i, words[:-1], words[-1], flags


def context_sources(stage: int | None = None) -> list[str]:
    return [src for i, srcs, _, flags in copies() if "from" not in flags and stage in (None, i.stage) for src in srcs]


def env_of_final_stage() -> dict[str, str]:
    env: dict[str, str] = {}
    for i in of_stage("ENV", final_stage()):
        for word in i.words():
            key, _, value = word.partition("=")
            env[key] = value
    return env


def runs(stage: int) -> str:
    return "\n".join(i.args for i in of_stage("RUN", stage))


def dockerignore_allows(path: str) -> bool:
    """Docker's .dockerignore semantics for this file's patterns: the last matching pattern wins."""
    allowed = True
    for raw in (REPO_ROOT / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        candidates = [path] + [str(Path(*Path(path).parts[:n])) for n in range(1, len(Path(path).parts))]
        if "**" in pattern:
            regex = fnmatch.translate(pattern.replace("**/", "*"))
        else:
            regex = fnmatch.translate(pattern).replace(".*", "[^/]*")
        if any(re.match(regex, candidate) for candidate in candidates):
            allowed = negate
    return allowed


def pyproject() -> dict[str, object]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


# ------------------------------------------------------------------------------------------------
# the build
# ------------------------------------------------------------------------------------------------


def test_every_copied_context_file_exists_and_is_not_ignored() -> None:
    sources = context_sources()
    assert sources, "the Dockerfile copies nothing from the build context?"
    for src in sources:
        assert (REPO_ROOT / src).exists(), f"COPY {src}: no such file in the repository"
        assert dockerignore_allows(src.rstrip("/")), f"COPY {src}: excluded by .dockerignore"
        if (REPO_ROOT / src).is_dir() and src.rstrip("/") != "docker/ca-certificates":
            python_files = [p.relative_to(REPO_ROOT) for p in (REPO_ROOT / src).rglob("*.py")]
            assert python_files and all(dockerignore_allows(str(p)) for p in python_files)
    # Nothing else is sent: the tests, caches and the virtualenv stay out of the context.
    for path in ("tests/unit/test_dockerfile.py", ".venv/bin/python", "README.md", ".icebergsync/catalog.db",
                 "icebergsync/__pycache__/spec.cpython-311.pyc", "docs/image.md"):
        assert not dockerignore_allows(path), path


def test_every_python_package_of_the_tree_is_installed_into_the_image() -> None:
    """The image installs the project non-editable: a package missing from pyproject's list is missing there."""
    setuptools = pyproject()["tool"]["setuptools"]  # type: ignore[index]
    listed = set(setuptools["packages"])
    found = set()
    for name, directory in setuptools["package-dir"].items():
        root = REPO_ROOT / directory
        for init in root.rglob("__init__.py"):
            relative = init.parent.relative_to(root)
            found.add(".".join([name, *relative.parts]))
    assert found == listed, f"not listed: {sorted(found - listed)}; listed but absent: {sorted(listed - found)}"


def test_every_stage_starts_from_the_base_argument_or_an_earlier_stage() -> None:
    global_args = [i.args for i in instructions() if i.stage < 0]
    assert global_args == ["BASE_IMAGE=debian:bookworm-slim"], "users build from the public Debian base"
    images = [image for image, _ in stages()]
    aliases = [alias for _, alias in stages()]
    assert images[0] == "${BASE_IMAGE}"
    for index, image in enumerate(images[1:], start=1):
        assert image in aliases[:index], f"stage {index} starts from {image}, not the base or an earlier stage"
    for instruction, _, _, flags in copies():
        if "from" in flags:
            assert flags["from"] in aliases[: instruction.stage], f"COPY --from={flags['from']} before its stage"


def test_java_17_and_the_tested_python_line_come_from_debian() -> None:
    runtime = runs(stage_index("runtime"))
    assert "openjdk-17-jre-headless" in runtime and "python3 " in runtime
    # bookworm's python3 is 3.11: the line the project is locked and tested for.
    assert PYTHON_LINE == "python3.11"
    requires = str(pyproject()["project"]["requires-python"])  # type: ignore[index]
    from packaging.specifiers import SpecifierSet

    assert SpecifierSet(requires).contains("3.11")
    assert env_of_final_stage()["SPARK_HOME"] == f"{VENV}/lib/{PYTHON_LINE}/site-packages/pyspark"


def test_the_venv_is_the_lock_with_hashes_then_the_project_without_dependencies() -> None:
    build = runs(stage_index("build"))
    assert f"{VENV}/bin/pip install --no-deps --require-hashes -r /opt/icebergsync/requirements.lock" in build
    assert "requirements.lock" in context_sources(stage_index("build"))
    assert "pip wheel --no-deps --no-build-isolation" in runs(stage_index("wheel"))
    final = runs(final_stage())
    assert re.search(r"pip install [^;]*--no-deps /tmp/wheels/icebergsync-\*\.whl;", final) and "pip check" in final
    env = env_of_final_stage()
    assert env["VIRTUAL_ENV"] == VENV and env["PATH"].startswith("${VIRTUAL_ENV}/bin:"), "the venv's commands first"


def test_the_build_backend_is_the_locked_one(tmp_path: Path) -> None:
    """The Dockerfile's awk filter, run here on requirements-dev.lock, keeps exactly pyproject's build
    requirements, with their hashes."""
    (command,) = re.findall(r"awk '[^']*' /build/requirements-dev\.lock", runs(stage_index("wheel")))
    program = shlex.split(command)[1]
    out = subprocess.run(["awk", program, str(REPO_ROOT / "requirements-dev.lock")], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    pins = re.findall(r"^(\S+)==(\S+) \\$", out, re.MULTILINE)
    required = [Requirement(r) for r in pyproject()["build-system"]["requires"]]  # type: ignore[index]
    assert sorted(pins) == sorted((r.name, next(iter(r.specifier)).version) for r in required)
    assert out.count("--hash=sha256:") >= len(pins)


def test_no_spark_connector_is_baked_in() -> None:
    """Spark's jars are pyspark's own: the job needs no Kafka connector or S3A (it reads Kafka with
    confluent-kafka and files and tables through pyiceberg's FileIO), and no Maven runs in the build."""
    build = runs(stage_index("build"))
    assert "mvn " not in build and "copy-dependencies" not in build and " maven" not in build
    assert not any("scripts/infra/maven" in src for src in context_sources())
    assert "ICEBERGSYNC_SPARK_JARS_PRESENT" not in env_of_final_stage(), "nothing reads it any more"


def test_build_only_certificates_stay_out_of_the_final_image() -> None:
    assert "docker/ca-certificates/" in context_sources(stage_index("build"))
    assert not any("ca-certificates" in src for src in context_sources(final_stage()))
    final_copies = {(flags["from"], src) for i, srcs, _, flags in copies() if i.stage == final_stage() and "from" in flags
                    for src in srcs}
    assert final_copies == {("build", VENV), ("wheel", "/build/wheels/")}
    assert (REPO_ROOT / ".gitignore").read_text().count("/docker/ca-certificates/*.crt") == 1


# ------------------------------------------------------------------------------------------------
# what runs
# ------------------------------------------------------------------------------------------------


def test_job_entry_point_matches_render() -> None:
    assert MAIN_APPLICATION_FILE == "local:///opt/icebergsync/spark_app/main.py"
    final_copies = [(srcs, dest) for i, srcs, dest, flags in copies() if i.stage == final_stage() and not flags]
    assert (["spark_app"], "/opt/icebergsync/spark_app") in final_copies
    assert (REPO_ROOT / "spark_app" / "main.py").is_file()


def test_operator_entry_point_matches_the_chart() -> None:
    scripts = pyproject()["project"]["scripts"]  # type: ignore[index]
    assert scripts["icebergsync-operator"] == "icebergsync_operator.main:main"
    deployment = (REPO_ROOT / "charts/icebergsync/templates/deployment.yaml").read_text()
    assert 'args: ["icebergsync-operator"]' in deployment and "  command:" not in deployment
    # Every package pyproject installs is copied into the image.
    package_dirs = set(pyproject()["tool"]["setuptools"]["package-dir"].values())  # type: ignore[index]
    copied = {src.rstrip("/") for src in context_sources()}
    for directory in package_dirs:
        assert any(directory == src or directory.startswith(f"{src}/") for src in copied), directory


@pytest.mark.parametrize("argv", [
    [str(Path(sys.executable).parent / "icebergsync"), "--version"],
    [sys.executable, "-m", "icebergsync_operator.main", "--help"],
    [sys.executable, str(REPO_ROOT / "spark_app" / "main.py"), "--help"],
])
def test_the_build_checks_start_here(argv: list[str]) -> None:
    """The commands the final stage's build step runs, run here from the same sources."""
    proc = subprocess.run(argv, cwd="/", capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


def test_runs_as_the_non_root_spark_user_under_tini() -> None:
    users = [i.args for i in of_stage("USER", final_stage())]
    assert users == ["185"], "numeric, for runAsNonRoot"
    assert "--uid=${spark_uid}" in runs(stage_index("runtime"))
    assert [i.args for i in instructions() if i.keyword == "ARG" and i.args.startswith("spark_uid")] == ["spark_uid=185"]
    chart_values = yaml.safe_load((REPO_ROOT / "charts" / "icebergsync" / "values.yaml").read_text())
    assert chart_values["podSecurityContext"]["runAsUser"] == 185
    (entrypoint,) = of_stage("ENTRYPOINT", final_stage())
    assert entrypoint.args == '["/usr/bin/tini", "--", "/opt/entrypoint.sh"]'
    assert "tini" in runs(stage_index("runtime"))


def run_entrypoint(tmp_path: Path, *args: str, **env: str) -> list[str]:
    """docker/entrypoint.sh with a SPARK_HOME and JAVA_HOME whose programs print their arguments."""
    for program in ("spark/bin/spark-submit", "java/bin/java"):
        path = tmp_path / program
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'#!/bin/sh\necho {Path(program).name}; for a in "$@"; do echo "$a"; done\n')
        path.chmod(0o755)
    environment = {"PATH": os.environ["PATH"], "SPARK_HOME": str(tmp_path / "spark"),
                   "JAVA_HOME": str(tmp_path / "java"), **env}
    proc = subprocess.run(["bash", str(ENTRYPOINT), *args], cwd=tmp_path, env=environment, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_entrypoint_driver_is_spark_submit_in_client_mode(tmp_path: Path) -> None:
    out = run_entrypoint(tmp_path, "driver", "--properties-file", "/opt/spark/conf/spark.properties", "app.py",
                         SPARK_DRIVER_BIND_ADDRESS="10.1.2.3")
    assert out == ["spark-submit", "--conf", "spark.driver.bindAddress=10.1.2.3",
                   "--conf", "spark.executorEnv.SPARK_DRIVER_POD_IP=10.1.2.3", "--deploy-mode", "client",
                   "--properties-file", "/opt/spark/conf/spark.properties", "app.py"]


def test_entrypoint_executor_is_the_kubernetes_executor_backend(tmp_path: Path) -> None:
    out = run_entrypoint(tmp_path, "executor", SPARK_JAVA_OPT_0="-Dspark.driver.port=7078", SPARK_EXECUTOR_MEMORY="1g",
                         SPARK_DRIVER_URL="spark://d:7078", SPARK_EXECUTOR_ID="3", SPARK_EXECUTOR_CORES="1",
                         SPARK_APPLICATION_ID="app", SPARK_EXECUTOR_POD_IP="10.0.0.9",
                         SPARK_RESOURCE_PROFILE_ID="0", SPARK_EXECUTOR_POD_NAME="pod-exec-3")
    spark_home = tmp_path / "spark"
    assert out == ["java", "-Dspark.driver.port=7078", "-Xms1g", "-Xmx1g",
                   "-cp", f"{spark_home}/conf:{spark_home}/jars/*:{tmp_path}",
                   "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
                   "--driver-url", "spark://d:7078", "--executor-id", "3", "--cores", "1", "--app-id", "app",
                   "--hostname", "10.0.0.9", "--resourceProfileId", "0", "--podName", "pod-exec-3"]


def test_entrypoint_runs_anything_else_as_given(tmp_path: Path) -> None:
    assert run_entrypoint(tmp_path, "echo", "icebergsync-operator") == ["icebergsync-operator"]
