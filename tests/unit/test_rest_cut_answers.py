"""What the REST cut's one request makes of the server's error answers (spark_app/iceberg/cut.py).

409 is a conflict (nothing landed: the caller re-checks and rebuilds); 500, 502, 503 and 504 leave the
outcome unknown (the caller searches for its snapshots); any other error is neither.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from requests import Response

from spark_app.iceberg.cut import TRANSACTIONS_COMMIT, _commit_rest


def catalog_answering(status: int) -> SimpleNamespace:
    """A stand-in REST catalog whose session answers every POST with ``status`` and an empty body."""
    response = Response()
    response.status_code = status
    response._content = b""
    posted: list[str] = []

    def post(url: str, data: bytes) -> Response:
        posted.append(url)
        return response

    return SimpleNamespace(_session=SimpleNamespace(post=post), posted=posted,
                           url=lambda endpoint, prefixed: f"http://catalog/v1/{endpoint}")


@pytest.mark.parametrize(("status", "raised"), [
    (409, CommitFailedException), (500, CommitStateUnknownException), (502, CommitStateUnknownException),
    (503, CommitStateUnknownException), (504, CommitStateUnknownException)])
def test_a_conflict_and_the_unknown_outcomes_are_told_apart(status: int, raised: type[Exception]) -> None:
    catalog = catalog_answering(status)
    with pytest.raises(raised):
        _commit_rest(catalog, [])  # type: ignore[arg-type]
    assert catalog.posted == [f"http://catalog/v1/{TRANSACTIONS_COMMIT}"]


@pytest.mark.parametrize("status", [400, 404, 410, 501, 505])
def test_other_errors_are_neither_a_conflict_nor_an_unknown_outcome(status: int) -> None:
    with pytest.raises(Exception) as raised:
        _commit_rest(catalog_answering(status), [])  # type: ignore[arg-type]
    assert not isinstance(raised.value, CommitFailedException | CommitStateUnknownException)
