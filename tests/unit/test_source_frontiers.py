"""Each source refuses a frontier of another source's shape (checked before a sink resumes from it)."""

from __future__ import annotations

from typing import Any

import pytest

from spark_app.sources.base import Source
from spark_app.sources.files import FilesSource
from spark_app.sources.generator import GeneratorSource
from spark_app.sources.kafka import KafkaSource

GENERATOR = {"next_id": 42}
FILES = {"after": "2026/01/a.json"}
KAFKA = {"orders": {"0": 5, "1": 0}, "returns": {}}
SHAPES: list[tuple[type[Source], dict[str, Any]]] = [(GeneratorSource, GENERATOR), (FilesSource, FILES),
                                                     (KafkaSource, KAFKA)]


@pytest.mark.parametrize(("source", "own"), SHAPES)
def test_a_source_accepts_its_own_frontiers_and_refuses_the_others(source: type[Source], own: dict[str, Any]) -> None:
    source.check_frontier(own)
    for _, other in SHAPES:
        if other is not own:
            with pytest.raises(ValueError, match="frontier is"):
                source.check_frontier(other)


@pytest.mark.parametrize(("source", "damaged"), [
    (GeneratorSource, {"next_id": -1}),
    (GeneratorSource, {"next_id": "7"}),
    (GeneratorSource, {"next_id": True}),
    (FilesSource, {"after": 3}),
    (KafkaSource, {"orders": {"zero": 5}}),
    (KafkaSource, {"orders": {"0": -2}}),
    (KafkaSource, {"orders": [5]}),
])
def test_damaged_frontiers_are_refused(source: type[Source], damaged: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="frontier is"):
        source.check_frontier(damaged)


def test_a_files_frontier_of_many_tables_holds_a_position_per_directory() -> None:
    FilesSource.check_frontier({"orders": {"after": "0001.json"}, "lines": {"after": ""}})
    for damaged in ({"orders": {"after": 1}}, {"orders": {"after": "a", "next": "b"}}, {"orders": "0001.json"}):
        with pytest.raises(ValueError, match="frontier is"):
            FilesSource.check_frontier(damaged)


def test_an_empty_kafka_frontier_means_every_partition_from_its_start() -> None:
    KafkaSource.check_frontier({})
