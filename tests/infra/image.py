"""The project's image as a test fixture, built for real.

``scripts/infra/image.sh build`` builds ``docker.io/library/icebergsync:dev`` from the Dockerfile on
a debootstrap Debian base in the project's own Docker engine (``scripts/infra/docker-engine.sh``:
private socket, no iptables, no bridge); it does nothing when an image of the same inputs exists.
A cold build takes ~15 minutes on 2 cores (see docs/image.md). The fixture fails -- never skips --
when the engine or the build fails, with the end of the build log.

Fixtures: ``docker_engine`` (the engine's ``DOCKER_HOST``; started for the session and stopped at
its end unless it was already running) and ``icebergsync_image`` (:class:`BuiltImage`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE = REPO_ROOT / "scripts" / "infra" / "docker-engine.sh"
IMAGE_SCRIPT = REPO_ROOT / "scripts" / "infra" / "image.sh"
BUILD_TIMEOUT = float(os.environ.get("ICEBERGSYNC_IMAGE_BUILD_TIMEOUT", "3600"))


def script_env(script: Path) -> dict[str, str]:
    """The KEY=VALUE lines ``script env`` prints."""
    out = subprocess.run(["bash", str(script), "env"], capture_output=True, text=True, check=True, timeout=60).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def run_script(script: Path, *args: str, timeout: float) -> None:
    """Run an infra script; fail the test session with its output if it fails."""
    proc = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{script.name} {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")


@dataclass(frozen=True)
class BuiltImage:
    """The built image and a way to run it in the project's engine."""

    name: str
    tarball: Path  #: where ``image.sh save`` writes the docker-archive the cluster imports
    docker_host: str

    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A docker CLI call against the project's engine (not checked)."""
        env = {**os.environ, "DOCKER_HOST": self.docker_host}
        return subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)

    def run(self, *command: str, network: str = "none", volumes: Sequence[Path] = (),
            env: Mapping[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``docker run --rm`` the image with ``command`` as its arguments (through the entrypoint).

        Each of ``volumes`` is mounted at the same path inside, so paths written into files (a
        catalog's metadata locations) mean the same inside and out. Fails unless it exits 0.
        """
        args = ["run", "--rm", f"--network={network}"]
        for volume in volumes:
            args += ["-v", f"{volume}:{volume}"]
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        proc = self.docker(*args, self.name, *command, timeout=timeout)
        assert proc.returncode == 0, f"{' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-6000:]}"
        return proc


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[str]:
    """The project's Docker engine, running for the session; its DOCKER_HOST."""
    was_running = subprocess.run(["bash", str(ENGINE), "status"], capture_output=True, check=False,
                                 timeout=60).returncode == 0
    run_script(ENGINE, "start", timeout=300)
    yield script_env(ENGINE)["DOCKER_HOST"]
    if not was_running:
        run_script(ENGINE, "stop", timeout=120)


@pytest.fixture(scope="session")
def icebergsync_image(docker_engine: str) -> BuiltImage:
    """``docker.io/library/icebergsync:dev``, built (or found current) by ``scripts/infra/image.sh``."""
    run_script(IMAGE_SCRIPT, "build", timeout=BUILD_TIMEOUT)
    env = script_env(IMAGE_SCRIPT)
    return BuiltImage(name=env["IMAGE"], tarball=Path(env["TARBALL"]), docker_host=docker_engine)
