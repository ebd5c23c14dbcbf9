"""Pure parts of the Kafka source: option merging, the per-trigger budget split, connector jars."""

from __future__ import annotations

import pyspark
import pytest

from icebergsync.errors import SpecError
from spark_app.session import JARS_PRESENT_ENV, connector_conf
from spark_app.sources.kafka import allocate, as_frontier, reader_options, topic_partitions


def test_options_become_connector_options_and_secrets_merge_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_PROTOCOL", "SASL_SSL")
    options = reader_options(
        {"security.protocol": "${env:KAFKA_PROTOCOL}", "kafka.fetch.max.bytes": "1048576", "minPartitions": "6"},
        {"kafka.sasl.jaas.config": "secret-jaas", "sasl.mechanism": "PLAIN"}, "spec.source.kafka.options")
    assert options == {
        "kafka.security.protocol": "SASL_SSL", "kafka.fetch.max.bytes": "1048576", "minPartitions": "6",
        "kafka.sasl.jaas.config": "secret-jaas", "kafka.sasl.mechanism": "PLAIN",
    }


def test_options_cannot_change_the_range_or_commit_offsets() -> None:
    with pytest.raises(SpecError) as error:
        reader_options({"startingOffsets": "latest", "group.id": "mine", "enable.auto.commit": "true"}, {},
                       "spec.source.kafka.options")
    assert len(error.value.problems) == 3
    assert "spec.source.kafka.options.group.id" in str(error.value)


def test_the_trigger_budget_is_split_by_what_each_partition_has() -> None:
    available = {("t", 0): 900, ("t", 1): 100, ("t", 2): 0}
    assert allocate(available, 5_000) == available
    share = allocate(available, 500)
    assert sum(share.values()) == 500 and share[("t", 2)] == 0 and share[("t", 0)] == 450
    assert sum(allocate({("t", 0): 1, ("t", 1): 1, ("t", 2): 1}, 2).values()) == 2


def test_frontier_round_trip() -> None:
    frontier = {"a": {"0": 5, "10": 7}, "b": {"2": 0}}
    assert as_frontier(topic_partitions(frontier)) == frontier


def test_connector_jars_are_fetched_only_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(JARS_PRESENT_ENV, raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    package = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    assert connector_conf("kafka", {}) == {"spark.jars.packages": package}
    assert connector_conf("kafka", {"spark.jars.packages": "a:b:1"}) == {"spark.jars.packages": f"a:b:1,{package}"}
    assert connector_conf("generator", {}) == {}
    assert connector_conf("kafka", {"spark.driver.extraClassPath": "/jars/spark-sql-kafka-0-10_2.13-4.0.1.jar"}) == {}
    monkeypatch.setenv(JARS_PRESENT_ENV, "1")
    assert connector_conf("kafka", {}) == {}
