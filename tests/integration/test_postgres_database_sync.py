"""PostgreSQL: a whole database in ONE sync, configured exactly as the docs and the example say.

What a user does: set PostgreSQL up with examples/postgres-debezium/postgres-setup.sql (run as it is, the
publication widened to the database's other tables), run Debezium with examples/postgres-debezium/
debezium-connector.json (only the connection, the offsets' storage, ``table.include.list``, the topic prefix and the
type-handling modes under test are overridden), and turn examples/postgres-debezium/icebergsync.yaml into one sync
of the whole database as docs/many-tables.md says (``topicPattern`` over ``<prefix>.public.(\\w+)``, ``table.name:
shop.{1}``, the composite key in ``spec.tables``, a dead-letter table per table), with NO spec.schema: every table is
created from its records' Kafka Connect schema and follows the source's ``ALTER TABLE``s.

The database (tests/integration/cdc_postgres/database.py) holds every type of docs/connectors.md's "PostgreSQL types"
tables, edge values (float32's largest and smallest, each integer type's bounds, year 1 and 9999, text outside the
BMP), NULLs, inserts, updates, deletes, primary-key updates, a multi-table transaction, a large TOASTed text that
updates leave unchanged under REPLICA IDENTITY DEFAULT, and ADD COLUMN, DROP COLUMN, widening ALTER COLUMN TYPE
(integer -> bigint, real -> double precision, numeric(10,2) -> numeric(12,2)) and RENAME COLUMN mid-stream.

Acceptance: once the sync has caught up, Apache Iceberg's Spark runtime returns for every table what ``SELECT *``
returns on PostgreSQL, row for row and value for value (tests/integration/cdc_postgres/tables.py normalizes each
type as Debezium's mode sends it), every column is of the type docs/connectors.md ("Connect types as Iceberg
columns") gives it, a dropped or renamed column stays as the docs say, and no record is a dead letter.

Run once per Debezium configuration of :data:`MODES` (a module-scoped fixture: one PostgreSQL for the module, a
database and a Debezium per configuration), together covering every value of ``decimal.handling.mode``,
``binary.handling.mode``, ``time.precision.mode`` (of those the type tables name) and ``interval.handling.mode``; one
configuration declares in ``spec.tables`` what the type tables tell users to declare (bytea as ``binary`` under
``base64``, the unconstrained numeric as ``decimal(38,18)``). The example's own configuration also goes through what a
user meets first and what a restart must survive: the unconstrained ``numeric`` the docs say stops a sync without
spec.schema (checked, then declared in ``spec.tables`` as the docs say), the job SIGKILLed right after a data commit and
right after a schema commit, each restart a higher sink version, and primary-key updates of rows whose TOASTed value
they leave unchanged.

Debezium is started, and its initial snapshot awaited, before the workload's first ALTER TABLE: a table rewrite
(``ALTER COLUMN … TYPE bigint``) is not MVCC-safe, and a snapshot that reads the table after it finds it empty (seen:
``Finished exporting 0 records for table 'public.accounts'``; the rows never updated afterwards were never sent).

Each configuration is also an upgrade from the previous release (tests/integration/previous_release.py): the sync's
first job runs the previous release's job code (``git archive`` of it, in a process of its own with the same virtual
environment, as an older image would), through ADD COLUMN and a widening (the example's: SIGKILLed after its first data
commit), and the later jobs run today's code at higher sink versions; the acceptance above holds all the same, and
the newest data commits note no documented Debezium setting missing (the ``SourceSettings`` condition).

A ``real`` widened to ``double precision`` mid-stream keeps its float32 values in the rows staged again after the
schema commit (:func:`test_real_widened_to_double_keeps_its_float32_values`; a bug this test found).
"""

from __future__ import annotations

import copy
import dataclasses
import random
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg import types as iceberg_types
from pyspark.sql import SparkSession

from icebergsync.errors import IncompatibleSchemaError
from icebergsync.source_settings.checks import SettingsVerdict
from icebergsync.spec import parse_spec
from spark_app.decoding.changes import UNAVAILABLE
from spark_app.job.loop import SyncJob
from tests.infra.services import REPO_ROOT, KafkaBroker
from tests.integration.cdc_postgres.database import (
    ACCOUNTS,
    CUSTOMERS,
    KINDS,
    MEASURES,
    MULTIDIMENSIONAL_KEY,
    ORDER_LINES,
    TABLES,
    DatabaseWorkload,
)
from tests.integration.cdc_postgres.progress import (
    caught_up,
    dead_letters,
    sink_id,
    wait_for_key,
)
from tests.integration.cdc_postgres.servers import (
    Postgres,
    example_connector,
    run_debezium,
    running_postgres,
    wait_streaming,
)
from tests.integration.cdc_postgres.tables import (
    DEBEZIUM_DEFAULTS,
    SourceTable,
    column_type,
    iceberg_rows,
    register_types,
    select_star,
)
from tests.integration.previous_release import materialize_previous_release
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    holds,
    job_process,
    kill_after_first_commit,
    sink_commits,
    source_settings,
    sync_document,
    write_spec,
)

EXAMPLE_SYNC = REPO_ROOT / "examples" / "postgres-debezium" / "icebergsync.yaml"
NAMESPACE = "shop"
# What docs/connectors.md tells users to declare for an unconstrained numeric ("PostgreSQL types": decimal(38,s), s at
# least the source's largest scale; "Connect types as Iceberg columns": declare it in spec.schema).
UNSCALED_NUMERIC = "decimal(38,18)"


@dataclasses.dataclass(frozen=True)
class Modes:
    """A Debezium configuration under test: the example's, with ``settings`` overriding its type handling."""

    name: str
    settings: dict[str, str]
    crashes: bool = False  # the documented refusal, and kill -9 after a data commit and after a schema commit
    # Columns declared in spec.tables where the docs' type tables tell users to (table -> column -> spec type)
    declare: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)


MODES = [
    # The example as it is: decimal precise, binary bytes, time adaptive_time_microseconds (interval: Debezium's
    # default, numeric).
    Modes("example", {}, crashes=True, declare={MEASURES.name: {"ratio": UNSCALED_NUMERIC}}),
    Modes("string-base64-adaptive", {"decimal.handling.mode": "string", "binary.handling.mode": "base64",
                                     "time.precision.mode": "adaptive", "interval.handling.mode": "string"}),
    Modes("double-hex-connect", {"decimal.handling.mode": "double", "binary.handling.mode": "hex",
                                 "time.precision.mode": "connect", "interval.handling.mode": "numeric"}),
    # As "PostgreSQL types" says to declare them: bytea as binary under base64 (created string otherwise), an
    # unconstrained numeric sent as text as decimal(38,s).
    Modes("string-base64-declared", {"decimal.handling.mode": "string", "binary.handling.mode": "base64"},
          declare={CUSTOMERS.name: {"avatar": "binary"}, KINDS.name: {"blob": "binary"},
                   MEASURES.name: {"ratio": UNSCALED_NUMERIC}}),
]


@pytest.fixture(scope="module")
def source_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    """One PostgreSQL server for the module; each configuration gets a database of its own."""
    with running_postgres(tmp_path_factory.mktemp("postgres")) as server:
        yield server


def topic_of(prefix: str, table: SourceTable) -> str:
    return f"{prefix}.public.{table.name}"


def database_sync(directory: Path, broker: KafkaBroker, prefix: str,
                  declare: dict[str, dict[str, str]]) -> dict[str, Any]:
    """examples/postgres-debezium/icebergsync.yaml turned into ONE sync of the database as docs/many-tables.md says:
    every topic of ``<prefix>.public.*`` into ``shop.{1}``, keyed by ``id`` unless ``spec.tables`` says otherwise,
    a dead-letter table per table, the transaction topic of the test's prefix; on a SQLite catalog under ``directory``
    (the test's: no catalogRef, no Kafka credentials, the test's commit interval). ``declare``: columns declared in ``spec.tables`` (with the table's key)
    as the docs say; no other schema anywhere."""
    example = next(document for document in yaml.safe_load_all(EXAMPLE_SYNC.read_text())
                   if document and document["kind"] == "IcebergSync")
    spec = copy.deepcopy(example["spec"])
    assert "schema" not in spec and spec["schemaEvolution"] == "evolve"
    kafka = spec["source"]["kafka"]
    del kafka["topic"], kafka["secretRef"]
    kafka.update(bootstrapServers=broker.bootstrap_servers, topicPattern=rf"{re.escape(prefix)}\.public\.(\w+)")
    table = spec.pop("table")
    del table["catalogRef"]
    assert table["name"] == f"{NAMESPACE}.customers" and table["key"] == ["id"]
    table["name"] = f"{NAMESPACE}.{{1}}"
    tables: dict[str, Any] = {f"{NAMESPACE}.{ORDER_LINES.name}": {"key": ORDER_LINES.key}}
    for name, columns in declare.items():
        key = next(table for table in TABLES if table.name == name).key
        assert key == ["id"], name
        tables.setdefault(f"{NAMESPACE}.{name}", {})["schema"] = [
            {"name": "id", "type": "long", "required": True},
            *({"name": column, "type": column_type} for column, column_type in columns.items())]
    spec["deadLetter"] = {"table": f"{NAMESPACE}.{{1}}_dead_letters"}
    transactions = spec["changes"]["transactions"]
    assert transactions["topic"] == "dbserver1.transaction"  # <topic.prefix>.transaction
    transactions["topic"] = f"{prefix}.transaction"
    del spec["commit"]  # the example's 1m: the test commits every second (sync_document)
    directory.mkdir(parents=True, exist_ok=True)
    return sync_document(directory, spec.pop("source"), name="shop-database", table=table, tables=tables, **spec)


def shop_tables(document: dict[str, Any]) -> list[Any]:
    catalog = catalog_of(parse_spec(document))
    return [catalog.load_table(name) for name in catalog.list_tables(NAMESPACE)]


def committed_data(document: dict[str, Any]) -> bool:
    return any(commit.kind == "data" for table in shop_tables(document)
               for commit in sink_commits(table, sink_id(document)))


def spec_type(field_type: Any) -> str:
    """An Iceberg type as a spec column type."""
    if isinstance(field_type, iceberg_types.ListType):
        return f"array<{spec_type(field_type.element_type)}>"
    if isinstance(field_type, iceberg_types.DecimalType):
        return f"decimal({field_type.precision},{field_type.scale})"
    return {"integer": "int", "timestamptz": "timestamptz"}.get(str(field_type), str(field_type))


def refused(document: dict[str, Any], version: int, spark: SparkSession, timeout: float = 180) -> BaseException:
    """Run the job until it stops on its own; its error (it must stop within ``timeout`` seconds)."""
    job = SyncJob(parse_spec(document), version, spark)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            job.run()
        except BaseException as error:  # handed to the test
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        job.stop_requested.set()
        thread.join(120)
        raise AssertionError(f"the job did not stop within {timeout:.0f} s")
    assert errors, "the job ended without an error"
    return errors[0]


@dataclasses.dataclass
class Compared:
    """One table after the sync caught up: its columns' types and its rows, as Iceberg has them and as the
    docs say it should have them, and its dead letters."""

    types: dict[str, str]
    expected_types: dict[str, str]
    rows: dict[tuple[Any, ...], dict[str, Any]]
    expected_rows: dict[tuple[Any, ...], dict[str, Any]]
    dead_letters: list[dict[str, Any]]


@dataclasses.dataclass
class Synced:
    """What one configuration's run left: each table compared, and what the sync said when it refused a table."""

    modes: dict[str, str]
    tables: dict[str, Compared]
    refusal: BaseException | None = None
    committed_before_refusal: bool = False
    # Primary-key updates of customers leaving their TOASTed notes unchanged (REPLICA IDENTITY DEFAULT), each in the
    # range of one trigger with the delete of its old key: the new key alone, and the new key updated after
    moved: tuple[Any, ...] | None = None
    moved_then_updated: tuple[Any, ...] | None = None
    # What the tables' newest data commits say of the documented Debezium settings (the SourceSettings condition)
    source_settings: SettingsVerdict | None = None


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's job code (tests/integration/previous_release.py), which each sync starts on."""
    return materialize_previous_release(tmp_path_factory.mktemp("previous-release"))


@pytest.fixture(scope="module", params=MODES, ids=[modes.name for modes in MODES])
def synced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, spark: SparkSession,
           kafka_broker: KafkaBroker, source_postgres: Postgres, previous_release: Path) -> Synced:
    """The workload on a database of its own, through Debezium (the example's connector with ``modes``) into ONE
    sync of the database (the example's sync, :func:`database_sync`), caught up, and each table compared. Each sync
    is an upgrade: its first job runs the previous release's code, the later ones today's at higher versions."""
    modes: Modes = request.param
    tmp_path = tmp_path_factory.mktemp(f"database-{modes.name}")
    database = f"shop_{modes.name.replace('-', '_')}"
    connection = source_postgres.create_database(database)
    workload = DatabaseWorkload(connection, random.Random(f"postgres-database-{modes.name}"))
    workload.setup()
    register_types(connection)
    workload.seed()
    prefix = f"pg{uuid.uuid4().hex[:8]}"
    (tmp_path / "debezium").mkdir()
    connector = example_connector(tmp_path / "debezium", source_postgres, database, prefix,
                                  [table.name for table in TABLES], modes.settings)
    effective = {name: connector.config.get(name, default) for name, default in DEBEZIUM_DEFAULTS.items()}
    for table in TABLES:
        kafka_broker.create_topic(topic_of(prefix, table), connector.partitions)
    assert connector.config["provide.transaction.metadata"] == "true"
    kafka_broker.create_topic(f"{prefix}.transaction", connector.partitions)  # BEGIN and END events
    debezium = run_debezium(tmp_path / "debezium", kafka_broker, connector.config)
    wait_streaming(debezium)
    document = database_sync(tmp_path / "sync", kafka_broker, prefix, modes.declare)
    synced = Synced(effective, {})
    try:
        workload.round()
        if modes.crashes:
            version = crash_and_restart(tmp_path, spark, kafka_broker, prefix, workload, document, synced,
                                        previous_release)
        else:
            version = run_previous_release(tmp_path, previous_release, workload, document)
        with BackgroundJob(SyncJob(parse_spec(document), version, spark)) as running:
            workload.widen("price", "numeric(12,2)")
            workload.accounts_changes()
            workload.drop_column("note")
            workload.accounts_changes()
            workload.rename_column("nick", "alias")
            workload.accounts_changes()
            workload.round()
            written(kafka_broker, prefix, workload.last_row())
            for table in TABLES:
                topic = topic_of(prefix, table)
                running.wait_until(lambda t=topic, n=table.name: caught_up(  # type: ignore[misc]
                    document, kafka_broker, t, f"{NAMESPACE}.{n}"), f"{table.name} caught up", 180)
        placeholders = [record for record in kafka_broker.consume(topic_of(prefix, CUSTOMERS), timeout=10)
                        if record.value and UNAVAILABLE.encode() in record.value]
        assert len(placeholders) >= 3, "Debezium sent too few unchanged TOASTed values to carry"
        for table in workload.tables:
            synced.tables[table.name] = compare(spark, connection, document, workload, table, effective,
                                                modes.declare.get(table.name, {}))
        synced.source_settings = source_settings(document, [f"{NAMESPACE}.{table.name}" for table in TABLES])
    finally:
        connection.close()
        debezium.stop()
    return synced


def written(broker: KafkaBroker, prefix: str, last: dict[str, tuple[Any, ...]]) -> None:
    """Until Debezium has written the change of each table's ``last`` key (and so every change before it)."""
    for table in TABLES:
        wait_for_key(broker, topic_of(prefix, table), dict(zip(table.key, last[table.name], strict=True)))


def widen_real(workload: DatabaseWorkload) -> None:
    """``real`` -> ``double precision`` between changes of accounts, while no job runs: the next trigger holds
    records of both shapes, and is staged again after its schema commit."""
    workload.accounts_changes()
    workload.widen("score", "double precision")
    workload.accounts_changes()


def run_previous_release(tmp_path: Path, release: Path, workload: DatabaseWorkload, document: dict[str, Any]) -> int:
    """The sync's first job on the previous ``release``'s code (version 1, a process of its own, as an older image
    runs it) while the workload goes on: after its first data commit, ADD COLUMN and a widening; once it has committed
    the new column of accounts it is stopped (SIGTERM, a clean stop), and ``real`` is widened while no job runs (the
    next trigger holds records of both shapes, as in :func:`crash_and_restart`). Returns the version today's code
    resumes as."""
    spec_path = write_spec(tmp_path / "sync", document)
    accounts = f"{NAMESPACE}.{ACCOUNTS.name}"

    def added_extra() -> bool:
        return "extra" in catalog_of(parse_spec(document)).load_table(accounts).schema().column_names

    with job_process(spec_path, 1, code=release) as (process, log):
        deadline = time.monotonic() + 240

        def wait_for(done: Callable[[], bool], what: str) -> None:
            while not holds(done):
                assert process.poll() is None, f"the previous release's job ended:\n{log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"the previous release missed {what}:\n{log.read_text()[-3000:]}"
                workload.go_on()
                time.sleep(1)

        wait_for(lambda: committed_data(document), "its first data commit")
        workload.add_column("extra", "text")  # the running job follows the source's ALTER TABLEs
        workload.widen("qty", "bigint")
        workload.accounts_changes()
        workload.round()
        wait_for(added_extra, "the ADD COLUMN")
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0, log.read_text()[-3000:]
    widen_real(workload)
    return 2


def crash_and_restart(tmp_path: Path, spark: SparkSession, broker: KafkaBroker, prefix: str,
                      workload: DatabaseWorkload, document: dict[str, Any], synced: Synced, release: Path) -> int:
    """The example's path: the documented refusal of an unconstrained numeric without spec.schema (noted in
    ``synced``), then the sync as the docs say to declare it, on the previous ``release``'s code, SIGKILLed right
    after its first data commit, then on today's, SIGKILLed right after its first schema commit (ADD COLUMN,
    integer -> bigint, real -> double precision); returns the next version."""
    undeclared = copy.deepcopy(document)
    del undeclared["spec"]["tables"][f"{NAMESPACE}.{MEASURES.name}"]
    written(broker, prefix, workload.last_row())  # so that the first trigger holds every table
    synced.refusal = refused(undeclared, 1, spark)
    synced.committed_before_refusal = committed_data(document)

    spec_path = write_spec(tmp_path / "sync", document)
    kill_after_first_commit(spec_path, lambda: committed_data(document), workload.go_on, version=2, code=release)
    workload.round()
    synced.moved = workload.move_toasted()
    synced.moved_then_updated = workload.move_toasted(then_update=True)
    workload.add_column("extra", "text")
    workload.widen("qty", "bigint")
    widen_real(workload)
    accounts = f"{NAMESPACE}.{ACCOUNTS.name}"
    with job_process(spec_path, 3, crash_at="schema-committed") as (process, log):
        assert process.wait(240) == -signal.SIGKILL, log.read_text()[-3000:]
    kinds = [commit.kind for commit in sink_commits(catalog_of(parse_spec(document)).load_table(accounts),
                                                    sink_id(document))]
    assert kinds[-1] == "schema", kinds
    return 4


def compare(spark: SparkSession, connection: Any, document: dict[str, Any], workload: DatabaseWorkload,
            table: SourceTable, modes: dict[str, str], declared: dict[str, str]) -> Compared:
    """The table as Iceberg's Spark reader returns it, and as the docs say it should be: ``SELECT *`` on PostgreSQL
    (with what the docs say of dropped and renamed columns and of multidimensional arrays), each column of the type
    docs/connectors.md gives it."""
    name = f"{NAMESPACE}.{table.name}"
    iceberg = catalog_of(parse_spec(document)).load_table(name)
    types = {field.name: spec_type(field.field_type) for field in iceberg.schema().fields}
    pg_types = {**{column: pg_type for column, (pg_type, _, _) in workload.gone.items()}, **dict(table.columns)}
    expected_types = {column: column_type(pg_type, modes) for column, pg_type in pg_types.items()}
    expected_types.update(declared)  # spec.tables
    if table.name != ACCOUNTS.name:
        expected_types = {column: expected_types[column] for column, _ in table.columns}
    columns = {column: (pg_types[column], types[column]) for column in types}
    expected = select_star(connection, table.name, {column: columns[column] for column, _ in table.columns},
                           table.key, modes)
    if table.name == ACCOUNTS.name:
        expected = workload.iceberg_accounts(expected, types, modes)
    if table.name == ORDER_LINES.name:
        # docs/connectors.md, "PostgreSQL types": Debezium sends a multidimensional array as one null per sub-array
        expected[MULTIDIMENSIONAL_KEY]["scores"] = [None, None]
    rows = iceberg_rows(spark, iceberg.metadata_location, columns, table.key, modes)
    assert len(expected) >= 10, f"{name}: the workload left too few rows to compare"
    return Compared(types, {k: v or "none" for k, v in expected_types.items()}, rows, expected,
                    dead_letters(document, f"{name}_dead_letters"))


def differences(compared: Compared, columns: set[str] | None = None,
                keys: set[Any] | None = None) -> list[str]:
    """Each key in one side only, and each value that differs (of ``columns`` and ``keys``, by default all)."""
    out = [f"{key}: only in iceberg" for key in compared.rows if key not in compared.expected_rows]
    out += [f"{key}: only in postgres" for key in compared.expected_rows if key not in compared.rows]
    out = [line for line in out if keys is None or any(line.startswith(f"{key}:") for key in keys)]
    for key, row in compared.expected_rows.items():
        if key in compared.rows and (keys is None or key in keys):
            actual = compared.rows[key]
            out += [f"{key} {column}: iceberg {actual.get(column)!r}, postgres {value!r}" for column, value in row.items()
                    if (columns is None or column in columns) and actual.get(column) != value]
    return out


# accounts.score, a real widened to double precision mid-stream
WIDENED_REAL = (ACCOUNTS.name, "score")


def test_every_table_has_the_sources_columns_of_the_documented_types(synced: Synced) -> None:
    """Each table is created from its records with the column types docs/connectors.md ("Connect types as Iceberg
    columns") gives, follows ADD COLUMN, the widenings, DROP and RENAME (accounts: the dropped ``note`` and renamed
    ``nick`` stay, ``extra`` and ``alias`` added, in that order)."""
    assert sorted(synced.tables) == sorted(table.name for table in TABLES)
    assert list(synced.tables[ACCOUNTS.name].types) == [
        "id", "name", "qty", "score", "price", "note", "nick", "extra", "alias"]
    for name, compared in synced.tables.items():
        assert compared.types == compared.expected_types, name


def test_iceberg_returns_what_select_star_returns(synced: Synced) -> None:
    """Row for row, value for value, every table and column."""
    for name, compared in synced.tables.items():
        assert differences(compared, set(compared.types)) == [], name
    if synced.moved is not None:  # carried from the old key (docs/connectors.md, "Primary-key updates")
        assert synced.tables[CUSTOMERS.name].rows[synced.moved]["notes"]


def test_real_widened_to_double_keeps_its_float32_values(synced: Synced) -> None:
    """The records sent before ``ALTER COLUMN score TYPE double precision`` say ``float``: staged again after the
    schema commit they hold the float32 PostgreSQL converted (-8397.599609375, not -8397.6)."""
    assert differences(synced.tables[WIDENED_REAL[0]], {WIDENED_REAL[1]}) == []


def test_the_examples_settings_leave_no_source_settings_warning(synced: Synced) -> None:
    """The example's connector and sync are what the docs require: the newest data commit of every table saw no
    event showing a documented Debezium setting missing (the SourceSettings condition is True)."""
    assert synced.source_settings is not None
    assert (synced.source_settings.ok, synced.source_settings.reason) == (True, "AsDocumented"), (
        synced.source_settings.message)


def test_no_record_is_a_dead_letter(synced: Synced) -> None:
    """Nothing in the workload is a documented dead letter (a multidimensional array is no dead letter: Debezium
    sends its sub-arrays as nulls; a primary-key update of a row with an unchanged TOASTed value is carried from the
    old key)."""
    assert {name: compared.dead_letters for name, compared in synced.tables.items() if compared.dead_letters} == {}


EXAMPLE_ONLY = pytest.mark.parametrize("synced", MODES[:1], indirect=True, ids=[MODES[0].name])


@EXAMPLE_ONLY
def test_a_moved_row_updated_in_the_same_trigger_keeps_its_toasted_value(synced: Synced) -> None:
    """docs/connectors.md, "Primary-key updates": a key updated right after its move, in the same trigger, follows
    the chain back to the old key (a dead letter whose row went missing on this branch's base, e52ba36)."""
    assert synced.moved_then_updated is not None
    compared = synced.tables[CUSTOMERS.name]
    assert differences(compared, keys={synced.moved_then_updated}) == []
    assert [letter["reason"] for letter in compared.dead_letters] == []


@EXAMPLE_ONLY
def test_an_unconstrained_numeric_without_spec_schema_stops_the_sync(synced: Synced) -> None:
    """docs/connectors.md, "Connect types as Iceberg columns": an unconstrained ``numeric`` (Debezium's
    ``VariableScaleDecimal``, ``decimal.handling.mode=precise``) has no column type: the sync stops (exit 3) naming
    the table and column, nothing of the trigger committed; declared in spec.tables as the docs say, it syncs (the
    other tests)."""
    assert isinstance(synced.refusal, IncompatibleSchemaError), repr(synced.refusal)
    message = str(synced.refusal)
    assert f"{NAMESPACE}.{MEASURES.name}" in message and "ratio" in message, message
    assert not synced.committed_before_refusal
