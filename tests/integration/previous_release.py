"""The previous release's job, taken from the repository's own history, for upgrade tests.

An upgrade test runs the first phase of a sync on the job code of :data:`PREVIOUS_RELEASE` and the rest on
today's, at the next sink version, as a user whose older image ran the sync would. The release's packages are
``git archive``d out of this clone (CI runs on a full clone of main, so its history is there) into a directory
that the job's process puts first on its path (its working directory and ``PYTHONPATH``, which Spark hands on to
its Python workers), with the same virtual environment. A clone without that commit fails the test, saying so.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.infra.services import REPO_ROOT

# The last landed release: bump it to main's commit at each release (docs/testing-upgrades.md).
PREVIOUS_RELEASE = "09c9eb0"
# The packages the job runs (its command line is ``python -m spark_app.cli run``).
JOB_PACKAGES = ("icebergsync", "spark_app")


def materialize_previous_release(directory: Path) -> Path:
    """:data:`PREVIOUS_RELEASE`'s job packages under ``directory``, checked to be what a process started there
    imports; raises AssertionError when this clone lacks the commit."""
    found = subprocess.run(["git", "-C", str(REPO_ROOT), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"],
                           capture_output=True, text=True, timeout=60)
    if found.returncode != 0:
        raise AssertionError(
            f"the previous release {PREVIOUS_RELEASE} (tests/integration/previous_release.py) is not in the history of "
            f"{REPO_ROOT}: the upgrade test runs its job code from git, so it needs a full clone of main "
            f"(git fetch --unshallow); {found.stderr.strip()}")
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", "--format=tar", PREVIOUS_RELEASE,
                              *JOB_PACKAGES], capture_output=True, check=True, timeout=120)
    directory.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(directory, filter="data")
    imported = subprocess.run(
        [sys.executable, "-c", "import icebergsync, spark_app.cli; print(icebergsync.__file__); "
                               "print(spark_app.cli.__file__)"],
        cwd=directory, env=release_environment(directory), capture_output=True, text=True, check=True, timeout=120)
    paths = [Path(line) for line in imported.stdout.split()]
    assert paths and all(path.is_relative_to(directory) for path in paths), (
        f"a process in {directory} imports the job from elsewhere: {paths}")
    return directory


def release_environment(code: Path) -> dict[str, str]:
    """The environment of a process that runs the job code under ``code`` (first on its path and its workers')."""
    inherited = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{inherited}" if inherited else str(code)}
