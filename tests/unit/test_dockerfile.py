"""The Dockerfile, checked without a Docker engine (there is none here; the image is not built).

What can be checked is: every file it copies from the build context exists and passes
.dockerignore; the pinned versions agree with the project's (Spark = pyspark, Python line, the
connector jars' Maven poms are the test suite's own, the Python pins are installed from
requirements.lock with hashes, see test_lock.py); the entry points it and the chart name exist,
agree with render.py's constants, and start; the final user is not root.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml
from icebergsync_operator.constants import MAIN_APPLICATION_FILE
from icebergsync_operator.settings import DEFAULT_SPARK_VERSION
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


# ------------------------------------------------------------------------------------------------
# a small Dockerfile reader
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    stage: int  #: index of the FROM this instruction belongs to
    keyword: str
    args: str

    def words(self) -> list[str]:
        return shlex.split(self.args)


def instructions(text: str | None = None) -> list[Instruction]:
    text = DOCKERFILE.read_text() if text is None else text
    logical: list[str] = []
    buffer = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):
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


def build_args() -> dict[str, str]:
    """Global ARG defaults (those before the first FROM)."""
    return dict(i.args.split("=", 1) for i in instructions() if i.keyword == "ARG" and i.stage < 0 and "=" in i.args)


def stages() -> list[tuple[str, str | None]]:
    """(image, alias) of each FROM, with ${ARG}s substituted."""
    args = build_args()
    result = []
    for i in instructions():
        if i.keyword == "FROM":
            words = i.words()
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
            alias = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            result.append((image, alias))
    return result


def final_stage() -> int:
    return len(stages()) - 1


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


def context_copies() -> list[tuple[Instruction, list[str], str]]:
    return [(i, src, dest) for i, src, dest, flags in copies() if "from" not in flags]


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
        regex = fnmatch.translate(pattern.replace("**/", "*")).replace(".*", "[^/]*") if "**" not in pattern \
            else fnmatch.translate(pattern.replace("**/", "*"))
        if any(re.match(regex, candidate) for candidate in candidates):
            allowed = negate
    return allowed


def pom_dependencies(pom: Path) -> dict[str, str]:
    root = ElementTree.parse(pom).getroot()
    deps = root.findall("m:dependencies/m:dependency", POM_NS)
    return {d.findtext("m:artifactId", namespaces=POM_NS) or "": d.findtext("m:version", namespaces=POM_NS) or ""
            for d in deps}


def pyproject() -> dict[str, object]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def pinned_dependencies() -> dict[str, str]:
    """pyproject's [project].dependencies: canonical name -> pinned version (all use ==)."""
    pins: dict[str, str] = {}
    for text in pyproject()["project"]["dependencies"]:  # type: ignore[index]
        requirement = Requirement(text)
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{text}: the image needs exact pins"
        pins[canonicalize_name(requirement.name)] = spec.version
    return pins


# ------------------------------------------------------------------------------------------------
# tests
# ------------------------------------------------------------------------------------------------


def test_every_copied_context_file_exists_and_is_not_ignored() -> None:
    sources = [src for _, srcs, _ in context_copies() for src in srcs]
    assert sources, "the Dockerfile copies nothing from the build context?"
    for src in sources:
        assert (REPO_ROOT / src).exists(), f"COPY {src}: no such file in the repository"
        assert dockerignore_allows(src), f"COPY {src}: excluded by .dockerignore"
        if (REPO_ROOT / src).is_dir():
            python_files = [p.relative_to(REPO_ROOT) for p in (REPO_ROOT / src).rglob("*.py")]
            assert python_files and all(dockerignore_allows(str(p)) for p in python_files)
    # Nothing else is sent: the tests, caches and the virtualenv stay out of the context.
    for path in ("tests/unit/test_dockerfile.py", ".venv/bin/python", "README.md", ".icebergsync/catalog.db",
                 "icebergsync/__pycache__/spec.cpython-311.pyc"):
        assert not dockerignore_allows(path), path


def test_copy_from_names_earlier_stages() -> None:
    aliases = [alias for _, alias in stages()]
    for instruction, _, _, flags in copies():
        if "from" in flags:
            assert flags["from"] in aliases[: instruction.stage], f"COPY --from={flags['from']} before its stage"


def test_spark_base_matches_pyspark() -> None:
    spark_version = pinned_dependencies()["pyspark"]
    images = [image for image, alias in stages() if alias == "spark"]
    assert images == [f"spark:{spark_version}-scala2.13-java17-ubuntu"], "official Apache Spark image, same version"
    assert spark_version == DEFAULT_SPARK_VERSION  # the SparkApplications' sparkVersion
    chart_values = yaml.safe_load((REPO_ROOT / "charts" / "icebergsync" / "values.yaml").read_text())
    assert chart_values["sparkVersion"] == spark_version
    # Scala 2.13: the connector artifacts carry the same suffix as pyspark's own jars.
    jars = {p.name for p in Path(str(metadata.distribution("pyspark").locate_file("pyspark/jars"))).iterdir()}
    assert f"spark-core_2.13-{spark_version}.jar" in jars


def test_python_line_is_the_tested_one() -> None:
    image, _ = stages()[final_stage()]
    match = re.fullmatch(r"python:(\d+)\.(\d+)-slim-bookworm", image)
    assert match, f"final stage should be an official python image, got {image}"
    version = (int(match.group(1)), int(match.group(2)))
    assert version == sys.version_info[:2], "the image's Python should be the one .venv is tested with"
    requires = str(pyproject()["project"]["requires-python"])  # type: ignore[index]
    from packaging.specifiers import SpecifierSet

    assert SpecifierSet(requires).contains(f"{version[0]}.{version[1]}")
    # The compileall path of the RUN step names the same version.
    assert f"/usr/local/lib/python{version[0]}.{version[1]}/site-packages" in DOCKERFILE.read_text()


def test_connector_jars_come_from_the_test_suite_poms() -> None:
    sources = {src for _, srcs, _ in context_copies() for src in srcs}
    poms = {"scripts/infra/maven/kafka-connector.xml", "scripts/infra/maven/s3a.xml"}
    assert poms <= sources
    spark_version = pinned_dependencies()["pyspark"]
    kafka = pom_dependencies(REPO_ROOT / "scripts/infra/maven/kafka-connector.xml")
    assert kafka == {"spark-sql-kafka-0-10_2.13": spark_version}
    hadoop = pom_dependencies(REPO_ROOT / "scripts/infra/maven/s3a.xml")
    jars = {p.name for p in Path(str(metadata.distribution("pyspark").locate_file("pyspark/jars"))).iterdir()}
    assert f"hadoop-client-api-{hadoop['hadoop-aws']}.jar" in jars, "hadoop-aws must match Spark's Hadoop"
    text = DOCKERFILE.read_text()
    # The same plugin and filtering as scripts/infra/services.sh, and the build proves the jars are there.
    services = (REPO_ROOT / "scripts/infra/services.sh").read_text()
    assert "maven-dependency-plugin:3.8.1:copy-dependencies" in text and "maven-dependency-plugin:3.8.1" in services
    assert f"spark-sql-kafka-0-10_2.13-{spark_version}.jar" in text
    assert f"hadoop-aws-{hadoop['hadoop-aws']}.jar" in text
    assert any(dest == "/opt/spark/jars/" and flags.get("from") == "jars" for _, _, dest, flags in copies())


def env_of_final_stage() -> dict[str, str]:
    env: dict[str, str] = {}
    for i in instructions():
        if i.keyword == "ENV" and i.stage == final_stage():
            for word in i.words():
                key, _, value = word.partition("=")
                env[key] = value
    return env


def test_image_tells_the_job_that_the_connector_jars_are_baked() -> None:
    from spark_app.session import JARS_PRESENT_ENV, KAFKA_CONNECTOR

    assert env_of_final_stage()[JARS_PRESENT_ENV] in ("1", "true", "yes")
    assert KAFKA_CONNECTOR.split(":")[1] + "-" + pinned_dependencies()["pyspark"] + ".jar" in DOCKERFILE.read_text()
    env = env_of_final_stage()
    assert env["SPARK_HOME"] == "/opt/spark" and env["PYSPARK_PYTHON"] == "/usr/local/bin/python3"


def test_dockerfile_installs_the_lock_then_the_project() -> None:
    runs = [i.args for i in instructions() if i.keyword == "RUN" and i.stage == final_stage()]
    assert any("pip install --no-deps --require-hashes -r /opt/icebergsync/requirements.lock" in run for run in runs)
    assert any("pip install --no-deps /opt/icebergsync" in run and "pip check" in run for run in runs)


def test_job_entry_point_matches_render() -> None:
    assert MAIN_APPLICATION_FILE.startswith("local://")
    in_image = MAIN_APPLICATION_FILE.removeprefix("local://")
    copied = {dest.rstrip("/"): srcs for _, srcs, dest in context_copies()}
    directory, file_name = in_image.rsplit("/", 1)
    assert directory in copied, f"nothing is copied to {directory}"
    (source,) = copied[directory]
    assert (REPO_ROOT / source / file_name).is_file()
    # The same path is what the project installs from: /opt/icebergsync holds pyproject.toml.
    assert copied.get("/opt/icebergsync/pyproject.toml") == ["pyproject.toml"]


def test_operator_entry_point_matches_the_chart() -> None:
    scripts = pyproject()["project"]["scripts"]  # type: ignore[index]
    assert scripts["icebergsync-operator"] == "icebergsync_operator.main:main"
    deployment = (REPO_ROOT / "charts/icebergsync/templates/deployment.yaml").read_text()
    assert 'args: ["icebergsync-operator"]' in deployment and '  command:' not in deployment
    # Every package pyproject installs is copied into the image.
    package_dirs = set(pyproject()["tool"]["setuptools"]["package-dir"].values())  # type: ignore[index]
    copied_sources = {src.rstrip("/") for _, srcs, _ in context_copies() for src in srcs}
    for directory in package_dirs:
        assert any(directory == src or directory.startswith(f"{src}/") for src in copied_sources), directory


@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "icebergsync_operator.main", "--help"],
    [sys.executable, str(REPO_ROOT / "spark_app" / "main.py"), "--help"],
    [sys.executable, str(REPO_ROOT / "spark_app" / "main.py"), "run", "--help"],
])
def test_entry_points_start(argv: list[str]) -> None:
    """The commands the image's build step runs (with --help), run here from the same sources."""
    proc = subprocess.run(argv, cwd="/", capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


def test_runs_as_the_non_root_spark_user() -> None:
    users = [i.args for i in instructions() if i.keyword == "USER" and i.stage == final_stage()]
    assert users and users[-1] == "185", "the final USER must be the spark uid (185), numeric for runAsNonRoot"
    assert "--uid=${spark_uid}" in DOCKERFILE.read_text()
    assert [i.args for i in instructions() if i.keyword == "ARG" and i.args.startswith("spark_uid")] == ["spark_uid=185"]
    chart_values = yaml.safe_load((REPO_ROOT / "charts" / "icebergsync" / "values.yaml").read_text())
    assert chart_values["podSecurityContext"]["runAsUser"] == 185


def test_spark_entrypoint_is_kept() -> None:
    entrypoints = [i.words() for i in instructions() if i.keyword == "ENTRYPOINT" and i.stage == final_stage()]
    assert entrypoints == [['["/opt/entrypoint.sh"]']] or entrypoints == [["[/opt/entrypoint.sh]"]]
    assert any(flags.get("from") == "spark" and "/opt/entrypoint.sh" in srcs for _, srcs, _, flags in copies())

