"""One IcebergSync, many tables, from ``kubectl apply``, in pods: ``helm install`` the chart,
MinIO, the Iceberg REST catalog and a KRaft Kafka broker as pods (tests/cluster/product.py), and a sync
whose ``source.kafka.topicPattern`` matches a topic per table and whose ``table.name`` is the template
``e2e.{1}``; the operator renders a SparkApplication and the real Kubeflow Spark Operator runs its driver
and executor pods. The test produces from the host to the broker the pods read.

Asserted from the tables (read from the host with pyiceberg) and the API, never from log text: every
non-idle topic's records in its own table exactly once, each table's commits carrying only its topic's
positions; an idle topic gets no table; a topic created while the sync runs gets its table; a deleted
driver pod recovers with a new version and no duplicates; the status says Running and lists every table
(``status.tables``, found in the catalog by the operator) with the version that last committed it, and that
the REST catalog's cuts are not atomic (condition ``AtomicCuts``). The tests run in order and share one sync.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

from tests.cluster.product import (
    CATALOG,
    KafkaService,
    Product,
    install_kafka,
    installed_product,
    small_spark,
    wait_for,
)
from tests.infra.cluster import NodeCluster
from tests.infra.image import BuiltImage
from tests.integration.sync_support import sink_commits, table_ids

# Installing (image import, pods, helm, the broker) and the first Spark start take minutes on 2 shared cores.
pytestmark = pytest.mark.timeout(1800)

NAMESPACE = "many"
SYNC = "shop"
SINK_ID = f"{NAMESPACE}/{SYNC}"
PATTERN = r"shop\.(\w+)"
TEMPLATE = "e2e.{1}"
FIRST_RECORDS = {"orders": 300, "lines": 600, "customers": 40, "payments": 120}
IDLE = "idle"
LATE = "returns"
PARTITIONS = 2
PROGRESS_SECONDS = 900.0


def topic(name: str) -> str:
    return f"shop.{name}"


@dataclass
class ManyTables:
    """The installed product, the broker, and how many records each topic got (ids 0, 1, … per topic)."""

    product: Product
    kafka: KafkaService
    produced: dict[str, int] = field(default_factory=dict)

    def create_topic(self, name: str) -> None:
        self.kafka.create_topic(topic(name), PARTITIONS)
        self.produced.setdefault(name, 0)

    def produce(self, name: str, count: int) -> None:
        first = self.produced[name]
        ids = range(first, first + count)
        self.kafka.produce(topic(name), [(f"k{i % 13}", json.dumps({"id": i, "name": f"{name}-{i}"})) for i in ids])
        self.produced[name] = first + count

    def table(self, name: str) -> Table:
        return self.product.catalog().load_table(f"e2e.{name}")

    def tables(self) -> set[str]:
        try:
            return {identifier[-1] for identifier in self.product.catalog().list_tables("e2e")}
        except NoSuchNamespaceError:
            return set()

    def status(self) -> dict[str, Any]:
        return dict(self.product.sync(SYNC).get("status") or {})

    def wait_all_rows(self) -> dict[str, list[int]]:
        """Wait until every record produced is in its topic's table; return each table's ids (duplicates kept)."""

        def landed() -> dict[str, list[int]] | str:
            found = {}
            for name, count in self.produced.items():
                if count == 0:
                    continue
                try:
                    ids = table_ids(self.table(name))
                except (NoSuchTableError, NoSuchNamespaceError):
                    return f"no table e2e.{name} yet"
                if sorted(set(ids)) != list(range(count)):
                    return f"e2e.{name}: {len(set(ids))} of {count} ids"
                found[name] = ids
            return found

        def probe() -> dict[str, list[int]] | None:
            result = landed()
            if isinstance(result, str):
                raise AssertionError(result)  # wait_for reports the last one
            return result

        expected = {name: count for name, count in self.produced.items() if count}
        return wait_for(f"every record in its table ({expected})", probe, PROGRESS_SECONDS, interval=5)

    def wait_status_of_every_table(self) -> dict[str, Any]:
        """Wait until the status says Running, and lists every table with records, each last committed (a data
        commit, not only its claim) by the running version with no backlog; return the status."""
        expected = {f"e2e.{name}" for name, count in self.produced.items() if count}

        def settled() -> dict[str, Any] | None:
            status = self.status()
            tables = status.get("tables") or {}
            items = tables.get("items") or []
            ok = (status.get("phase") == "Running" and status.get("lastCommit")
                  and tables.get("count") == len(expected) and tables.get("lagging") == 0
                  and tables.get("problems") == 0 and not tables.get("omitted") and not tables.get("unread")
                  and {item["table"] for item in items} == expected
                  and all(item.get("sinkVersion") == status.get("sinkVersion") for item in items)
                  # a data commit's (a claim has no frontier and no lag): the status is refreshed on a timer
                  and all(item.get("frontier") and item.get("lag") for item in items))
            return status if ok else None

        return wait_for(f"phase Running and status.tables listing {sorted(expected)}", settled, 300, interval=5)

    def assert_exactly_once(self) -> None:
        ids = self.wait_all_rows()
        assert ids == {name: list(range(count)) for name, count in self.produced.items() if count}
        assert IDLE not in self.tables()


def sync_document(kafka: KafkaService) -> dict[str, Any]:
    return {
        "apiVersion": "icebergsync.io/v1alpha1",
        "kind": "IcebergSync",
        "metadata": {"name": SYNC, "namespace": NAMESPACE},
        "spec": {
            "source": {"kafka": {"bootstrapServers": kafka.bootstrap_in_cluster, "topicPattern": PATTERN}},
            "schema": [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"}],
            "table": {"catalogRef": {"name": CATALOG}, "name": TEMPLATE},
            "commit": {"interval": "5s", "pollInterval": "2s", "targetFileSize": "8Mi"},
            "spark": small_spark(),
        },
    }


@pytest.fixture(scope="module")
def many(node_cluster: NodeCluster, icebergsync_image: BuiltImage,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManyTables]:
    with installed_product(node_cluster, icebergsync_image, NAMESPACE, ["lake"],
                           tmp_path_factory.mktemp("spark-operator")) as product:
        deployment = ManyTables(product, install_kafka(node_cluster, NAMESPACE, icebergsync_image))
        for name, count in {**FIRST_RECORDS, IDLE: 0}.items():
            deployment.create_topic(name)
            deployment.produce(name, count)
        product.apply(sync_document(deployment.kafka))
        yield deployment


def test_each_topic_lands_once_in_its_own_table_and_the_status_says_running(many: ManyTables) -> None:
    many.assert_exactly_once()
    assert many.tables() == set(FIRST_RECORDS)
    for name in FIRST_RECORDS:
        commits = sink_commits(many.table(name), SINK_ID)
        assert commits, name
        # A table's commits carry its own topic's positions only: it is a single-table sink of that topic.
        assert {t for c in commits if c.frontier for t in c.frontier} == {topic(name)}, name

    status = many.wait_status_of_every_table()
    tables = status["tables"]
    assert {item["table"] for item in tables["items"]} == {f"e2e.{name}" for name in FIRST_RECORDS}  # not idle
    assert {item["lag"] for item in tables["items"]} == {"0 records"}
    newest = tables["newestCommitTable"]
    assert int(status["lastCommit"]["snapshotId"]) in {c.snapshot_id for c in sink_commits(
        many.table(newest.split(".", 1)[1]), SINK_ID)}
    # The REST catalog commits a trigger's tables one by one: said by the condition, not hidden.
    (atomic,) = [c for c in status["conditions"] if c["type"] == "AtomicCuts"]
    assert (atomic["status"], atomic["reason"]) == ("False", "CatalogCommitsTablesOneByOne")
    application = json.loads(many.product.kubectl("get", "sparkapplication", status["application"], "-o", "json"))
    assert application["status"]["applicationState"]["state"] == "RUNNING"
    assert len(many.product.pods("spark-role=driver")) == 1
    assert len(many.product.pods("spark-role=executor")) == 1


def test_a_topic_created_while_the_sync_runs_gets_its_table(many: ManyTables) -> None:
    many.create_topic(LATE)
    many.produce(LATE, 25)
    many.produce("orders", 30)

    many.assert_exactly_once()
    assert many.tables() == {*FIRST_RECORDS, LATE}
    assert many.wait_status_of_every_table()["tables"]["count"] == len(FIRST_RECORDS) + 1


def test_a_deleted_driver_pod_recovers_without_duplicates(many: ManyTables) -> None:
    version_before = int(many.status()["sinkVersion"])
    (driver,) = many.product.pods("spark-role=driver")
    many.produce("orders", 50)
    many.produce("lines", 50)
    many.product.kubectl("delete", "pod", driver["metadata"]["name"], "--wait=false")
    many.produce("customers", 10)

    wait_for("a relaunch with a new sink version",
             lambda: int(many.status().get("sinkVersion") or 0) > version_before, 600, interval=5)
    after = [*FIRST_RECORDS, LATE]
    for name in after:
        many.produce(name, 20)

    many.assert_exactly_once()
    # The new version claimed every table that got records after it started (lazily, at their records).
    for name in after:
        assert sink_commits(many.table(name), SINK_ID)[-1].writer.version > version_before, name
    assert int(many.wait_status_of_every_table()["sinkVersion"]) > version_before
