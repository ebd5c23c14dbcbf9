"""Pure parts of the Kafka source: client settings from options and the Secret, refusals, the per-trigger
budget split, unit splitting, positions, connector jars."""

from __future__ import annotations

import itertools
import json
import pickle

import pyarrow as pa
import pytest

from icebergsync.errors import SpecError
from spark_app.sources.kafka import (
    KafkaUnitReader,
    allocate,
    as_frontier,
    positions,
    source_options,
    split_ranges,
    topic_partitions,
)
from spark_app.sources.kafka_client import client_settings

FIELD = "spec.source.kafka.options"
JAAS_SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="p\\"w";'


def _problems(options: dict[str, str], secret: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(SpecError) as error:
        source_options("b:9092", options, secret or {}, FIELD)
    return error.value.problems


def test_options_and_secret_keys_become_librdkafka_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_PROTOCOL", "SASL_SSL")
    options = source_options(
        "b:9092",
        {"security.protocol": "${env:KAFKA_PROTOCOL}", "kafka.fetch.max.bytes": "1048576", "minPartitions": "6",
         "sasl.mechanism": "scram-sha-512", "isolation.level": "read_uncommitted", "fetch.max.wait.ms": "200"},
        {"sasl.jaas.config": JAAS_SCRAM, "ca.crt": "-----BEGIN CERTIFICATE-----..."}, FIELD)
    client = options.client
    assert client.bootstrap_servers == "b:9092"
    assert client.connection == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob",
        "sasl.password": 'p"w', "ssl.ca.pem": "-----BEGIN CERTIFICATE-----...",
    }
    assert client.fetch == {"fetch.max.bytes": "1048576", "fetch.wait.max.ms": "200"}
    assert client.isolation_level == "read_uncommitted"
    assert options.min_units == 6 and options.max_unit_offsets is None


def test_java_client_tls_keys_map_to_librdkafka() -> None:
    client = client_settings(
        "b:9093", {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.keystore.type": "PEM"}, {},
        {"ssl.truststore.certificates": "CA", "ssl.keystore.certificate.chain": "CHAIN", "ssl.keystore.key": "KEY"},
        FIELD)
    assert client.connection == {"security.protocol": "SSL", "ssl.ca.pem": "CA", "ssl.certificate.pem": "CHAIN",
                                 "ssl.key.pem": "KEY"}
    files = client_settings("b:9093", {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                       "ssl.truststore.location": "/etc/ca.pem", "ssl.truststore.type": "PEM"}, {},
                            {"sasl.username": "u", "sasl.password": "p"}, FIELD)
    assert files.connection["ssl.ca.location"] == "/etc/ca.pem"
    assert files.isolation_level == "read_committed"


def test_options_cannot_change_the_range_or_commit_offsets() -> None:
    problems = _problems({"startingOffsets": "latest", "group.id": "mine", "enable.auto.commit": "true"})
    assert len(problems) == 3
    assert any(p.startswith(f"{FIELD}.group.id: set by icebergsync itself") for p in problems)
    assert any(p.startswith(f"{FIELD}.startingOffsets: set by icebergsync itself") for p in problems)
    assert _problems({"kafka.bootstrap.servers": "x:1"}) == [
        f"{FIELD}.kafka.bootstrap.servers: set by icebergsync itself (use spec.source.kafka.bootstrapServers)"]


def test_credentials_in_the_spec_unknown_and_unsafe_keys_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    problems = _problems({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
                          "sasl.password": "literal", "ssl.endpoint.identification.algorithm": "",
                          "enable.ssl.certificate.verification": "false", "ssl.truststore.type": "JKS",
                          "no.such.setting": "1", "includeHeaders": "true"})
    text = "\n".join(problems)
    assert f"{FIELD}.sasl.password: a credential; put it in the Secret" in text
    assert f"{FIELD}.ssl.endpoint.identification.algorithm: refused, unsafe" in text
    assert f"{FIELD}.enable.ssl.certificate.verification: refused, unsafe" in text
    assert f"{FIELD}.ssl.truststore.type: only PEM truststores" in text
    assert f"{FIELD}.no.such.setting: not a supported Kafka client setting" in text
    assert f"{FIELD}.includeHeaders: an option of Spark's Kafka connector" in text
    # A credential may come from an environment variable (itself from a Secret).
    monkeypatch.setenv("KAFKA_PASSWORD", "from-env")
    client = source_options("b:9092", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                       "sasl.username": "u", "sasl.password": "${env:KAFKA_PASSWORD}"}, {}, FIELD).client
    assert client.connection["sasl.password"] == "from-env"


def test_inconsistent_security_settings_are_refused() -> None:
    assert any("needs one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" in p
               for p in _problems({"security.protocol": "SASL_SSL"}, {"sasl.username": "u", "sasl.password": "p"}))
    assert any("GSSAPI" in p for p in _problems({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"},
                                                {"sasl.username": "u", "sasl.password": "p"}))
    assert any("needs sasl.username and sasl.password" in p
               for p in _problems({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}))
    assert any("does not go with sasl.mechanism PLAIN" in p
               for p in _problems({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
                                  {"sasl.jaas.config": JAAS_SCRAM}))
    assert any("secretRef.sasl.jaas.config: only org.apache.kafka" in p
               for p in _problems({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
                                  {"sasl.jaas.config": "com.example.Login required;"}))
    assert any("TLS settings ['ssl.ca.pem'] are given but the protocol is PLAINTEXT" in p
               for p in _problems({}, {"ca.crt": "CA"}))
    assert any("SASL settings are given but the protocol is SSL" in p
               for p in _problems({"security.protocol": "SSL", "sasl.mechanism": "PLAIN"}))
    assert any(p.startswith(f"{FIELD}.minPartitions: a positive integer") for p in _problems({"minPartitions": "0"}))


def test_the_trigger_budget_is_split_by_what_each_partition_has() -> None:
    available = {("t", 0): 900, ("t", 1): 100, ("t", 2): 0}
    assert allocate(available, 5_000) == available
    share = allocate(available, 500)
    assert sum(share.values()) == 500 and share[("t", 2)] == 0 and share[("t", 0)] == 450
    assert sum(allocate({("t", 0): 1, ("t", 1): 1, ("t", 2): 1}, 2).values()) == 2


def _covers(parts: list[tuple[str, int, int, int]], ranges: dict[tuple[str, int], tuple[int, int]]) -> None:
    """The parts tile every range exactly, in source order."""
    assert parts == sorted(parts)
    for (topic, partition), (start, end) in ranges.items():
        mine = [(lo, hi) for t, p, lo, hi in parts if (t, p) == (topic, partition)]
        assert mine[0][0] == start and mine[-1][1] == end
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(mine))


def test_ranges_split_so_every_core_has_work_but_not_into_tiny_units() -> None:
    one = {("t", 0): (100, 100_100)}
    parts = split_ranges(one, 8, None)
    assert len(parts) == 8 and {hi - lo for _, _, lo, hi in parts} == {12_500}
    _covers(parts, one)
    assert split_ranges({("t", 0): (0, 5_000)}, 8, None) == [("t", 0, 0, 5_000)]  # too small to split
    # Enough partitions for the cores: one unit each.
    many = {("t", p): (0, 50_000) for p in range(8)}
    assert len(split_ranges(many, 8, None)) == 8
    # Uneven partitions: the big one gets more units.
    uneven = {("a", 0): (0, 90_000), ("a", 1): (0, 10_000)}
    parts = split_ranges(uneven, 4, None)
    _covers(parts, uneven)
    assert [(t, p) for t, p, _, _ in parts].count(("a", 0)) == 4
    # maxRecordsPerPartition caps a unit; minPartitions (min_split=1) splits small ranges too.
    capped = split_ranges({("t", 0): (0, 10)}, 1, 3)
    assert [(lo, hi) for _, _, lo, hi in capped] == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert len(split_ranges({("t", 0): (0, 10)}, 5, None, min_split=1)) == 5
    assert split_ranges({("t", 0): (0, 2)}, 5, None, min_split=1) == [("t", 0, 0, 1), ("t", 0, 1, 2)]


def test_positions_are_json_objects() -> None:
    got = positions('we"ird', 3, pa.array([0, 17], pa.int64())).to_pylist()
    assert [json.loads(p) for p in got] == [{"topic": 'we"ird', "partition": 3, "offset": 0},
                                            {"topic": 'we"ird', "partition": 3, "offset": 17}]


def test_the_unit_reader_pickles() -> None:
    client = client_settings("b:9092", {}, {}, {}, FIELD)
    reader = KafkaUnitReader(client, [], "json")
    assert pickle.loads(pickle.dumps(reader)) == reader


def test_frontier_round_trip() -> None:
    frontier = {"a": {"0": 5, "10": 7}, "b": {"2": 0}}
    assert as_frontier(topic_partitions(frontier)) == frontier
