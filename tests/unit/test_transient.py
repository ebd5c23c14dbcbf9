"""The transient-fault policy (icebergsync/transient/): what is retried, how long, and how the job ends after it."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.exceptions import NoSuchTableError, ServiceUnavailableError, TooManyRequestsError
from urllib3.util.retry import Retry

from icebergsync.catalog import with_retries
from icebergsync.cli import exit_status_of
from icebergsync.errors import (
    EXIT_CATALOG_UNREACHABLE,
    EXIT_FAILED,
    EXIT_FENCED,
    EXIT_OBJECT_STORE_UNREACHABLE,
    CatalogUnreachableError,
    FencedError,
    ObjectStoreUnreachableError,
)
from icebergsync.transient import object_store, rest_catalog
from icebergsync.transient.calls import object_store_fault, retry_transient
from icebergsync.transient.http import ATTEMPTS, ReadingAdapter, mount_retries, repeated
from icebergsync.transient.object_store import RetryingFileIO, close_upload
from icebergsync.transient.reads import RetriedReads, RetryingInputFile, unread_answer


class _Weather:
    """A real HTTP server on 127.0.0.1 that answers each path's planned statuses in turn, then 200 (status 0: a 200
    whose body breaks off)."""

    def __init__(self, plans: dict[str, list[tuple[int, dict[str, str]]]]):
        self.plans = {path: list(plan) for path, plan in plans.items()}
        self.seen: list[tuple[str, str, float]] = []
        weather = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                weather.seen.append((self.command, self.path, time.monotonic()))
                plan = weather.plans.get(self.path, [])
                status, headers = plan.pop(0) if plan else (200, {})
                body = b"{}"
                self.send_response(status or 200)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body) if status else 100))  # 0: a truncated answer
                self.end_headers()
                self.wfile.write(body)
                if not status:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def weather() -> Iterator[type[_Weather]]:
    made: list[_Weather] = []

    def make(plans: dict[str, list[tuple[int, dict[str, str]]]]) -> _Weather:
        made.append(_Weather(plans))
        return made[-1]

    yield make  # type: ignore[misc]
    for server in made:
        server.close()


def test_a_read_rides_out_429_with_retry_after_and_503(weather: Any) -> None:
    server = weather({"/v1/config": [(429, {"Retry-After": "1"}), (503, {}), (503, {})]})
    session = mount_retries(requests.Session())
    answer = session.get(server.url + "/v1/config", timeout=10)
    assert answer.status_code == 200
    times = [at for _, _, at in server.seen]
    assert len(times) == 4
    assert times[1] - times[0] >= 0.95  # Retry-After: 1 was honoured


def test_a_commit_is_repeated_after_429_but_never_after_503(weather: Any) -> None:
    server = weather({"/commit": [(429, {"Retry-After": "0"}), (503, {})]})
    session = mount_retries(requests.Session())
    answer = session.post(server.url + "/commit", data=b"{}", timeout=10)
    # 429: refused, not applied, so sent again; 503 on a POST: its outcome is the committer's to check.
    assert answer.status_code == 503
    assert [method for method, _, _ in server.seen] == ["POST", "POST"]


def test_a_read_whose_answer_breaks_off_is_sent_again_but_never_a_commit(weather: Any) -> None:
    server = weather({"/v1/config": [(0, {}), (0, {})], "/commit": [(0, {})]})
    session = mount_retries(requests.Session())
    assert session.get(server.url + "/v1/config", timeout=10).json() == {}
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        session.post(server.url + "/commit", data=b"{}", timeout=10)
    assert [method for method, _, _ in server.seen] == ["GET", "GET", "GET", "POST"]


def test_a_read_that_got_no_answer_is_left_to_urllib3s_retries() -> None:
    """A connection closed before any answer: urllib3's :class:`Retry` (here none) decides; only a body that breaks off
    after the answer came is sent again by the adapter."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def close_each() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            connection.close()

    threading.Thread(target=close_each, daemon=True).start()
    session = requests.Session()
    session.mount("http://", ReadingAdapter(max_retries=Retry(total=0, raise_on_status=False)))
    try:
        with pytest.raises(requests.ConnectionError):
            session.get(f"http://127.0.0.1:{listener.getsockname()[1]}/v1/config", timeout=10)
    finally:
        listener.close()
    assert len(accepted) == 1


def test_the_job_opens_a_retrying_rest_catalog_and_file_io() -> None:
    properties = with_retries({"type": "rest", "uri": "http://catalog:8181"})
    assert "type" not in properties
    assert properties["py-catalog-impl"] == rest_catalog.IMPL
    assert properties["py-io-impl"] == object_store.IMPL
    sql = with_retries({"type": "sql", "uri": "sqlite:///x.db", "py-io-impl": "custom.FileIO"})
    assert sql == {"type": "sql", "uri": "sqlite:///x.db", "py-io-impl": "custom.FileIO"}  # the user's own stays


def test_the_retrying_file_io_uploads_small_objects_in_one_put() -> None:
    io = RetryingFileIO({"s3.endpoint": "http://127.0.0.1:9", "s3.region": "us-east-1",
                         "s3.access-key-id": "a", "s3.secret-access-key": "b"})
    settings = io.fs_by_scheme("s3", "bucket").__reduce__()[1][0]
    assert settings["allow_delayed_open"] is True
    assert settings["access_key"] == "a" and settings["endpoint_override"] == "http://127.0.0.1:9"


class _LostCompletion:
    """An output stream whose close fails as Arrow's does when CompleteMultipartUpload's answer was lost."""

    def close(self) -> None:
        raise OSError("When completing multiple part upload for key 'data/x.parquet' in bucket 'lake': AWS Error "
                      "NO_SUCH_UPLOAD during CompleteMultipartUpload operation: The specified multipart upload "
                      "does not exist.")


def test_a_completed_upload_whose_answer_was_lost_counts_as_closed(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(b"p" * 1000)
    io = RetryingFileIO({})
    close_upload(_LostCompletion(), io, str(path), 1000)
    with pytest.raises(OSError, match="NO_SUCH_UPLOAD"):
        close_upload(_LostCompletion(), io, str(path), 999)  # not every byte: the error stands
    with pytest.raises(OSError, match="NO_SUCH_UPLOAD"):
        close_upload(_LostCompletion(), io, str(tmp_path / "missing.parquet"), 1000)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_an_idempotent_step_is_repeated_until_it_succeeds() -> None:
    clock = _Clock()
    faults = [TooManyRequestsError("slow down"), ServiceUnavailableError("busy"), requests.ConnectionError("reset")]

    def step() -> str:
        if faults:
            raise faults.pop(0)
        return "loaded"

    assert retry_transient("load t", step, sleep=clock.sleep, clock=lambda: clock.now) == "loaded"
    assert len(clock.slept) == 3 and clock.slept[0] < clock.slept[2]


def test_a_fault_that_outlasts_the_budget_is_the_documented_error() -> None:
    clock = _Clock()

    def catalog_down() -> None:
        raise ServiceUnavailableError("ServiceUnavailableError: RestError: Service Unavailable")

    with pytest.raises(CatalogUnreachableError, match="create t: the catalog did not answer usefully"):
        retry_transient("create t", catalog_down, budget_seconds=60, sleep=clock.sleep, clock=lambda: clock.now)
    assert 0 < clock.now <= 60

    def store_down() -> None:
        raise OSError("AWS Error SLOW_DOWN during PutObject operation: Please reduce your request rate.")

    with pytest.raises(ObjectStoreUnreachableError):
        retry_transient("write", store_down, budget_seconds=10, sleep=clock.sleep, clock=lambda: clock.now)


def test_an_error_that_is_not_weather_is_raised_at_once() -> None:
    calls = []

    def missing() -> None:
        calls.append(1)
        raise NoSuchTableError("no such table")

    with pytest.raises(NoSuchTableError):
        retry_transient("load t", missing, sleep=lambda _: None)
    assert calls == [1]
    assert not object_store_fault(FileNotFoundError("AWS Error NETWORK_CONNECTION"))


def test_the_job_ends_with_one_line_and_the_documented_status(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "icebergsync")
    assert exit_status_of(ServiceUnavailableError("a\nlong\nbody: Service Unavailable")) == EXIT_CATALOG_UNREACHABLE
    assert caplog.records[-1].getMessage() == ("the job: the catalog did not answer usefully "
                                               "(ServiceUnavailableError: body: Service Unavailable)")
    assert exit_status_of(OSError("AWS Error SLOW_DOWN during UploadPart")) == EXIT_OBJECT_STORE_UNREACHABLE
    assert exit_status_of(FencedError("ns/s", 1, 2)) == EXIT_FENCED
    assert exit_status_of(RuntimeError("first\nboom")) == EXIT_FAILED
    last = caplog.records[-1]
    assert last.getMessage() == "icebergsync failed: RuntimeError: boom" and last.exc_info is None
    assert caplog.records[-2].exc_info is not None  # the traceback comes before the one line


class _TaskFailed(Exception):
    """How the driver hears of a Spark task's error (py4j's Py4JJavaError): the worker's traceback inside a Java trace."""


def test_an_executors_object_store_fault_is_the_object_stores_status(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "icebergsync")
    failed = _TaskFailed(
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/app/spark_app/writer.py", line 316, in close\n'
        "OSError: When uploading object with key 'a.parquet' in bucket 'b': AWS Error SLOW_DOWN during PutObject "
        "operation: Please reduce your request rate.\n\n\tat org.apache.spark.api.python.BasePythonRunner\n\t... 1 more")
    assert exit_status_of(failed) == EXIT_OBJECT_STORE_UNREACHABLE
    assert caplog.records[-1].getMessage() == (
        "the job: the object store did not answer usefully (_TaskFailed of a Spark task: OSError: When uploading "
        "object with key 'a.parquet' in bucket 'b': AWS Error SLOW_DOWN during PutObject operation: Please reduce "
        "your request rate.)")
    assert exit_status_of(_TaskFailed("OSError: disk full\n\t... 1 more")) == EXIT_FAILED  # not weather


UNREAD = OSError("AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush response stream (eof: 0, bad: 1)")


def test_a_step_is_repeated_while_transient_at_most_attempts_times_and_then_raises_the_last_error() -> None:
    clock, calls = _Clock(), []

    def unread() -> None:
        calls.append(1)
        raise UNREAD

    with pytest.raises(OSError, match="Failed to flush response stream"):
        repeated("a read", unread, unread_answer, sleep=clock.sleep)
    assert len(calls) == ATTEMPTS and len(clock.slept) == ATTEMPTS - 1 and clock.slept[0] < clock.slept[-1]
    answers: list[Any] = [UNREAD, UNREAD, b"bytes"]

    def flaky() -> bytes:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return bytes(answer)

    assert repeated("a read", flaky, unread_answer, sleep=clock.sleep) == b"bytes"
    denied = OSError("AWS Error ACCESS_DENIED during GetObject operation: Access Denied")
    assert not unread_answer(denied) and not unread_answer(RuntimeError(str(UNREAD)))


def test_retried_reads_read_and_seek_as_the_file_they_wrap() -> None:
    stream = pa.PythonFile(RetriedReads(pa.BufferReader(b"0123456789"), "memory"), mode="r")
    assert stream.size() == 10 and stream.read_at(3, 4) == b"456"
    stream.seek(0)
    assert stream.read(2) == b"01" and stream.tell() == 2
    stream.seek(-3, 2)
    assert stream.read() == b"789" and stream.read(5) == b""
    stream.seek(1)
    stream.seek(2, 1)
    assert stream.read_buffer(2).to_pybytes() == b"34"
    stream.close()
    assert stream.closed


def test_the_job_reads_s3_objects_through_retried_reads_and_local_files_directly(tmp_path: Path) -> None:
    io = RetryingFileIO({"s3.endpoint": "http://127.0.0.1:9", "s3.region": "us-east-1"})
    assert all(isinstance(io.new_input(f"{scheme}://bucket/a.parquet"), RetryingInputFile) for scheme in ("s3", "s3a"))
    local = tmp_path / "a.bin"
    local.write_bytes(b"local")
    with io.new_input(str(local)).open() as stream:
        assert not isinstance(stream, pa.PythonFile) and stream.read() == b"local"
