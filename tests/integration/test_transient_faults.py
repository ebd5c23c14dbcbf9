"""The fault tier: real syncs, each launched ONCE, through seeded fault proxies in front of the Iceberg REST
catalog and MinIO (tests/integration/fault_proxy.py), ride out the weather: exactly once, exit 0 when stopped.

* an append sync (Kafka, its broker restarted mid-stream: same data directory and ports), a keyed sync (Debezium
  change files) and a sync of two tables whose every trigger is ONE ``POST /v1/transactions/commit`` (the reference
  server declared atomic: no other writer here), each through a random plan of every fault kind (429 with
  Retry-After, 500, 503, SlowDown, resets, lost answers, stalls, truncated bodies; error answers to reads of any size,
  those shorter than the answer's body included, each error answer once to such a short read) and a lost first data
  commit; the tables are read back directly, not through the proxies;
* no data or delete file stays that no snapshot references, and no manifest or manifest list of a commit attempt
  that never landed either;
* a fault outlasting every retry budget ends the job with its documented status (4: catalog, 6: object store) and
  one last line naming the cause.

The seed is random per run unless ``ICEBERGSYNC_FAULT_SEED`` sets it; it is printed with the faults injected.
"""

from __future__ import annotations

import os
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyiceberg.table import Table

from icebergsync import errors
from icebergsync.tables.cuts import ATOMIC_MULTI_TABLE_COMMIT
from tests.infra.services import KafkaBroker, RestCatalog, S3Server, restart_kafka
from tests.integration.fault_proxy import (
    CATALOG_KINDS,
    S3_KINDS,
    SHORT_READ_REFUSED,
    FaultPlan,
    Request,
    Weather,
    everything,
    weather,
)
from tests.integration.kafka_support import (
    covered_ids,
    kafka_document,
    last_frontier,
    new_topic,
    produce_orders,
)
from tests.integration.keyed_support import KEY, SCHEMA, ChangeStream, pyiceberg_rows, write_change_files
from tests.integration.sync_support import (
    run_job_process,
    sink_commits,
    sync_document,
    table_ids,
    unreferenced_files,
    write_spec,
)
from tests.integration.test_many_tables_cuts import (
    PER_BURST,
    Shop,
    cuts_of,
    expected_rows,
    synced,
    table_rows,
)

SEED = int(os.environ.get("ICEBERGSYNC_FAULT_SEED") or random.SystemRandom().randrange(2**31))


def launched_once(spec_path: Path, done: Callable[[], bool], found: Weather) -> str:
    """Run the job ONCE until ``done()``, then stop it (SIGTERM); it must end with 0. Returns its log."""
    status, log = run_job_process(spec_path, 1, stop_when=done, timeout=300)
    assert status == 0, f"the job ended {status} (seed {SEED}):\n{found.report()}\n{log[-4000:]}"
    return log


def file_kinds(files: list[str]) -> dict[str, int]:
    """How many of ``files`` are of each kind: data, delete, manifest, manifest list, metadata."""
    kinds: dict[str, int] = {}
    for path in files:
        name = path.rsplit("/", 1)[-1]
        kind = ("manifest list" if name.startswith("snap-") else "manifest" if name.endswith(".avro")
                else "metadata" if "/metadata/" in path else "delete" if "delete" in name else "data")
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


@dataclass
class Run:
    """What one sync through the weather left: its table (read directly), the faults, its unreferenced files."""

    table: Table
    found: Weather
    unreferenced: list[str]

    def assert_no_unreferenced_data(self) -> None:
        kinds = file_kinds(self.unreferenced)
        assert not {kind: n for kind, n in kinds.items() if kind in ("data", "delete")}, (
            f"unreferenced files {kinds} (seed {SEED}): {self.unreferenced}")

    def assert_no_unreferenced_manifest(self) -> None:
        kinds = file_kinds(self.unreferenced)
        print(f"\nunreferenced files after the run, by kind: {kinds}")
        assert not {kind: n for kind, n in kinds.items() if kind.startswith("manifest")}, kinds


def finished_run(table: Table, found: Weather, s3: S3Server) -> Run:
    return Run(table, found, unreferenced_files(table, s3.fileio_properties))


# -- an append sync (Kafka) ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def append_run(tmp_path_factory: pytest.TempPathFactory, kafka_broker: KafkaBroker, rest_catalog_s3: RestCatalog,
               s3_server: S3Server) -> Run:
    """Kafka to the REST catalog through the weather; after the first commit the broker restarts (its data directory and
    ports kept, 2 s down) and more records come."""
    directory = tmp_path_factory.mktemp("append")
    topic = new_topic(kafka_broker, 3)
    placed = produce_orders(kafka_broker, topic, range(1_500))
    name = f"ns_{uuid.uuid4().hex[:8]}.orders"
    direct = rest_catalog_s3.load()

    def done() -> bool:
        covered = covered_ids(placed, last_frontier(direct.load_table(name)), topic)
        if covered and len(placed) == 1_500:
            restart_kafka(kafka_broker, down_seconds=2)
            placed.update(produce_orders(kafka_broker, topic, range(1_500, 2_000)))
        return len(covered) == len(placed) == 2_000

    with weather(rest_catalog_s3, s3_server, SEED) as found:
        document = kafka_document(directory, kafka_broker, topic, source={"maxRecordsPerTrigger": 250},
                                  commit={"interval": "200ms"}, table={"catalog": found.spec_catalog, "name": name})
        launched_once(write_spec(directory, document), done, found)
    table = direct.load_table(name)
    assert table_ids(table) == list(range(2_000)), f"seed {SEED}"
    return finished_run(table, found, s3_server)


def test_an_append_sync_rides_out_every_fault_exactly_once(append_run: Run) -> None:
    found = append_run.found
    assert found.faults >= 10, found.report()
    assert found.catalog.injected["503"] >= 1  # at least the lost first data commit


def test_an_append_sync_leaves_no_unreferenced_data_file(append_run: Run) -> None:
    append_run.assert_no_unreferenced_data()


def test_an_append_sync_leaves_no_unreferenced_manifest(append_run: Run) -> None:
    append_run.assert_no_unreferenced_manifest()


# -- a keyed sync (Debezium change files) ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed_run(tmp_path_factory: pytest.TempPathFactory, rest_catalog_s3: RestCatalog, s3_server: S3Server) -> Run:
    directory = tmp_path_factory.mktemp("keyed")
    stream = ChangeStream("debezium", random.Random(SEED))
    write_change_files(directory / "inbox", stream, 3, 500)
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    direct = rest_catalog_s3.load()

    def done() -> bool:
        commits = sink_commits(direct.load_table(f"{namespace}.orders"), "test/orders")
        return bool(commits) and commits[-1].frontier == {"after": "0002.json"}

    with weather(rest_catalog_s3, s3_server, SEED + 10) as found:
        document = sync_document(
            directory, {"files": {"path": str(directory / "inbox"), "maxFilesPerTrigger": 1}}, schema=SCHEMA,
            table={"catalog": found.spec_catalog, "name": f"{namespace}.orders", "key": KEY,
                   "partitionBy": ["day(updated_at)"]},
            changes={"format": "debezium", "deletes": "position"}, deadLetter={"table": f"{namespace}.orders_dlq"},
            commit={"interval": "200ms"})
        launched_once(write_spec(directory, document), done, found)
    table = direct.load_table(f"{namespace}.orders")
    assert pyiceberg_rows(table) == stream.model, f"seed {SEED}"
    return finished_run(table, found, s3_server)


def test_a_keyed_sync_rides_out_every_fault_exactly_once(keyed_run: Run) -> None:
    assert keyed_run.found.faults >= 10, keyed_run.found.report()


def test_a_keyed_sync_leaves_no_unreferenced_file(keyed_run: Run) -> None:
    keyed_run.assert_no_unreferenced_data()
    keyed_run.assert_no_unreferenced_manifest()


# -- two tables, each trigger ONE POST /v1/transactions/commit -------------------------------------------------------


@pytest.fixture(scope="module")
def cut_run(tmp_path_factory: pytest.TempPathFactory, kafka_broker: KafkaBroker, rest_catalog_s3: RestCatalog,
            s3_server: S3Server) -> tuple[Run, Run]:
    directory = tmp_path_factory.mktemp("cut")
    shop = Shop(kafka_broker)
    namespace = f"shop_{uuid.uuid4().hex[:8]}"
    direct = rest_catalog_s3.load()
    for _ in range(3):
        shop.burst(PER_BURST)
    with weather(rest_catalog_s3, s3_server, SEED + 20, **{ATOMIC_MULTI_TABLE_COMMIT: "true"}) as found:
        document = shop.document(directory, found.spec_catalog, namespace)
        document["spec"]["source"]["kafka"]["maxRecordsPerTrigger"] = 20
        launched_once(write_spec(directory, document), lambda: synced(direct, shop, namespace), found)
    orders, lines = (direct.load_table(f"{namespace}.{name}") for name in ("orders", "lines"))
    assert (table_rows(orders), table_rows(lines)) == expected_rows(3 * PER_BURST), f"seed {SEED}"
    cuts = [cuts_of(table) for table in (orders, lines)]
    assert cuts[0] == cuts[1] and all(cut["atomic"] is True for cut in cuts[0].values()), cuts
    return finished_run(orders, found, s3_server), finished_run(lines, found, s3_server)


def test_a_sync_of_two_tables_commits_each_cut_once_through_every_fault(cut_run: tuple[Run, Run]) -> None:
    found = cut_run[0].found
    assert found.faults >= 10, found.report()
    assert sum(1 for _, method, path, kind in found.catalog.log if path.endswith("/transactions/commit")) >= 2


def test_a_sync_of_two_tables_leaves_no_unreferenced_file(cut_run: tuple[Run, Run]) -> None:
    for run in cut_run:
        run.assert_no_unreferenced_data()
        run.assert_no_unreferenced_manifest()


def test_the_three_syncs_met_every_kind_of_fault_forty_times_or_more(append_run: Run, keyed_run: Run,
                                                                      cut_run: tuple[Run, Run]) -> None:
    catalog, store = Counter[str](), Counter[str]()
    for found in (append_run.found, keyed_run.found, cut_run[0].found):
        catalog.update(found.catalog.injected)
        store.update(found.store.injected)
    print(f"\nfaults of the three syncs (seed {SEED}): catalog {dict(catalog)}, object store {dict(store)}")
    short_reads_refused = store.pop(SHORT_READ_REFUSED, 0)
    assert catalog.total() + store.total() >= 40
    assert set(catalog) == set(CATALOG_KINDS) and set(store) == set(S3_KINDS), (catalog, store)
    assert short_reads_refused >= 4  # SlowDown, 429, 500, 503 each once to a short read, at least


# -- a fault outlasting every budget ---------------------------------------------------------------------------------


def data_file(request: Request) -> bool:
    return "/data/" in request.path


@pytest.mark.parametrize(("server", "applies", "status", "cause"), [
    ("catalog", everything, "EXIT_CATALOG_UNREACHABLE", "ServiceUnavailable"),  # the driver's first request
    ("store", data_file, "EXIT_OBJECT_STORE_UNREACHABLE", "HTTP status 503"),  # an executor's (its HEAD: no body)
])
def test_a_fault_outlasting_the_budget_ends_the_job_with_its_status_and_one_line(
        tmp_path: Path, kafka_broker: KafkaBroker, rest_catalog_s3: RestCatalog, s3_server: S3Server, server: str,
        applies: Callable[[Request], bool], status: str, cause: str) -> None:
    """503 (with ``Retry-After: 1``) forever from the catalog; SlowDown forever to an executor's requests for its data
    files (a Spark task's failure on the driver). The object store's budget is Arrow's default strategy (3 attempts,
    ``s3.retry-strategy-impl``): the job's own (10 attempts, the SDK's standard backoff) waits out about 100 s."""
    topic = new_topic(kafka_broker, 1)
    produce_orders(kafka_broker, topic, range(100))
    forever = (FaultPlan(SEED, ("503",) if server == "catalog" else ("slowdown",), applies=applies, run=10**9),)
    plans = {"catalog": forever, "store": ()} if server == "catalog" else {"catalog": (), "store": forever}
    with weather(rest_catalog_s3, s3_server, SEED, **plans,
                 **{"s3.retry-strategy-impl": "pyarrow.fs.AwsDefaultS3RetryStrategy"}) as found:
        document = kafka_document(tmp_path, kafka_broker, topic, table={
            "catalog": found.spec_catalog, "name": f"ns_{uuid.uuid4().hex[:8]}.orders"})
        ended, log = run_job_process(write_spec(tmp_path, document), 1, timeout=240)
    last = log.strip().splitlines()[-1]
    assert ended == getattr(errors, status), f"{found.report()}\n{log[-4000:]}"
    assert " ERROR icebergsync " in last and cause in last, log[-4000:]
