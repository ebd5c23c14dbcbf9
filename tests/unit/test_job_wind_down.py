"""The end of a job's run (``SyncJob._wind_down``): a trigger staged ahead is discarded, never committed, and the
transaction aligner is closed whatever happened to that trigger."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from spark_app.job.loop import SyncJob, _Loop


class Closable:
    """Stands in for the transaction aligner: only whether it was closed matters here."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def job_with_aligner(discarded: list[Any]) -> tuple[SyncJob, Closable]:
    job = SyncJob.__new__(SyncJob)  # the run's end needs no catalog or session
    aligner = Closable()
    job.aligner = aligner  # type: ignore[assignment]
    job._discard = discarded.append  # type: ignore[method-assign]
    return job, aligner


def loop_with_ahead(ahead: Future[Any] | None) -> _Loop:
    loop = _Loop.__new__(_Loop)
    loop.ahead = ahead
    return loop


def test_a_trigger_staged_ahead_is_discarded_and_the_aligner_closed() -> None:
    discarded: list[Any] = []
    job, aligner = job_with_aligner(discarded)
    ahead: Future[Any] = Future()
    ahead.set_result("the next trigger")
    loop = loop_with_ahead(ahead)
    job._wind_down(loop)
    assert discarded == ["the next trigger"]
    assert aligner.closed and loop.ahead is None


def test_the_aligner_is_closed_when_staging_the_next_trigger_failed() -> None:
    discarded: list[Any] = []
    job, aligner = job_with_aligner(discarded)
    ahead: Future[Any] = Future()
    ahead.set_exception(OSError("the source went away while staging"))
    loop = loop_with_ahead(ahead)
    with pytest.raises(OSError, match="went away"):
        job._wind_down(loop)
    assert aligner.closed, "a failed staged-ahead trigger left the transaction aligner (its Kafka consumer) open"
    assert discarded == [] and loop.ahead is None


def test_nothing_staged_ahead_still_closes_the_aligner() -> None:
    job, aligner = job_with_aligner([])
    job._wind_down(loop_with_ahead(None))
    assert aligner.closed
