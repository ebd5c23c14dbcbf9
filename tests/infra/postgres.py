"""Test fixture: a real PostgreSQL (Debian's postgresql, started on 127.0.0.1 for one test module, stopped
after it), for ``sql`` catalogs on PostgreSQL."""

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
import pytest

POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
SERVER_MAX_SECONDS = 600
PASSWORD = "pg-secret-31"


def free_port() -> int:
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
    port = free_port()
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
