"""Values Debezium did not send, carried from the table's live rows at commit time (spark_app/commit/carry/).

Change events are decoded, collapsed and staged by the job's own task function
(:func:`spark_app.staging.pipeline.stage_changes`) and committed by SinkCommitter on real tables of format 2
(position delete files) and 3 (deletion vectors); Apache Iceberg's Spark reader must show the values
kept, never the placeholder. The carry reads the head the commit lands on: a value changed by a
commit between staging and committing is the one carried.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from icebergsync.catalog import ensure_table
from icebergsync.errors import BadInputError
from icebergsync.protocol import Writer, attempt_file_prefix
from icebergsync.schema import iceberg_schema
from icebergsync.spec import Column
from spark_app.commit.carry import live_rows
from spark_app.commit.carry.live_rows import live_positions, read_live_rows
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.key_index.locate import locate_rows
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.decoding.changes import UNAVAILABLE, decode_changes
from spark_app.decoding.deadletter import DEAD_LETTER_SCHEMA
from spark_app.staging.equality_deletes import delete_plan
from spark_app.staging.pipeline import stage_changes
from spark_app.staging.writer import TablePlan, WritePlan
from tests.infra.services import RestCatalog
from tests.integration.rest_proxy import RestProxy
from tests.integration.sync_support import unreferenced_sink_files

COLUMNS = [Column(name="id", type="long", required=True), Column(name="bio", type="string"),
           Column(name="n", type="int")]
KEY = ("id",)


def plan_of(catalog: Catalog, name: str, dead: str | None, writer: Writer) -> WritePlan:
    def table_plan(identifier: str) -> TablePlan:
        table = catalog.load_table(identifier)
        return TablePlan(table.metadata.location, dict(table.metadata.properties), table.schema(), table.spec(),
                         dict(table.io.properties))
    return WritePlan(writer.sink_id, writer.version, attempt_file_prefix(writer), table_plan(name),
                     table_plan(dead) if dead else None, 1 << 30, 1 << 26, ("id",), None, key=KEY)


def stage(plan: WritePlan, events: list[dict[str, Any]], task: str) -> TriggerOutput:
    """One trigger as the job stages it (one key bucket) and adds it up (spark_app/job/loop.py, Staged.of)."""
    values = [json.dumps(e).encode() for e in events]
    changes = decode_changes(values, None, lambda i: {"record": i}, COLUMNS, list(KEY), "debezium", 0)
    result = stage_changes(plan, [changes], task)
    assert result.rejection is None
    output = TriggerOutput(records=result.records, dead_letters=result.dead_letters,
                           data_files=[f.data_file for f in result.files if f.table == "data"],
                           delete_files=[f.data_file for f in result.files if f.table == "delete"],
                           dead_letter_files=[f.data_file for f in result.files if f.table == "dead_letter"])
    if result.touched_keys is not None:
        output.touched_keys = pa.ipc.open_stream(result.touched_keys).read_all()
    if result.carried is not None:
        output.carried, output.carry_plan = pa.ipc.open_stream(result.carried).read_all(), plan
    if result.moved is not None:
        output.moved = pa.ipc.open_stream(result.moved).read_all()
    return output


def upsert(op: str, key: int, bio: str | None, n: int) -> dict[str, Any]:
    return {"op": op, "before": None, "after": {"id": key, "bio": bio, "n": n}, "source": {}}


def rows(spark: SparkSession, catalog: Catalog, name: str) -> dict[int, tuple[str | None, int | None]]:
    frame = spark.read.format("iceberg").load(catalog.load_table(name).metadata_location)
    found = frame.select("id", "bio", "n").collect()
    assert len(found) == len({r["id"] for r in found}), "a key is in the table twice"
    return {r["id"]: (r["bio"], r["n"]) for r in found}


def people_sink(tmp_path: Path, format_version: str) -> tuple[Catalog, str, str, SinkCommitter, WritePlan]:
    """A keyed table of ``COLUMNS`` with a dead-letter table, its started committer and its write plan."""
    catalog = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "wh").as_uri())
    name, dead = f"shop_{uuid.uuid4().hex[:6]}.people", "shop_dlq.letters"
    ensure_table(catalog, name, iceberg_schema(COLUMNS), [], {"format-version": format_version}, key=list(KEY))
    ensure_table(catalog, dead, DEAD_LETTER_SCHEMA, [], {})
    writer = Writer("test/people", 1, "a1")
    committer = SinkCommitter(catalog, name, writer, dead_letter_identifier=dead)
    committer.start([])
    plan = plan_of(catalog, name, dead, writer)
    return catalog, name, dead, committer, plan


@pytest.mark.parametrize("format_version", ["2", "3"])
def test_unsent_values_are_carried_from_the_live_row_the_commit_lands_on(tmp_path: Path, spark: SparkSession,
                                                                        format_version: str) -> None:
    catalog, name, dead, committer, plan = people_sink(tmp_path, format_version)
    long_a, long_b = "a" * 5000, "b" * 5000

    committer.commit(stage(plan, [upsert("r", 1, long_a, 1), upsert("r", 2, long_b, 1), upsert("r", 3, None, 1)],
                           "00000-0"), {"t": 1})
    # carried from the table (1, 3), from the same trigger (4), kept over two updates (2), unknown key (9)
    second = stage(plan, [upsert("u", 1, UNAVAILABLE, 2), upsert("u", 3, UNAVAILABLE, 2),
                          upsert("c", 4, "fresh", 1), upsert("u", 4, UNAVAILABLE, 2),
                          upsert("u", 2, UNAVAILABLE, 2), upsert("u", 2, UNAVAILABLE, 3),
                          upsert("u", 9, UNAVAILABLE, 1)], "00001-0")
    assert second.carried is not None and sorted(second.carried.column("id").to_pylist()) == [1, 2, 3, 9]
    # Another trigger lands first and changes key 1's value: the carry reads the head it commits on.
    committer.commit(stage(plan, [upsert("u", 1, "changed", 7)], "00002-0"), {"t": 2})
    committer.commit(second, {"t": 3})
    assert (second.records, second.dead_letters) == (4, 1)  # the carried rows are counted once they land
    assert rows(spark, catalog, name) == {1: ("changed", 2), 2: (long_b, 3), 3: (None, 2), 4: ("fresh", 2)}
    letters = catalog.load_table(dead).scan().to_arrow().to_pylist()
    assert len(letters) == 1 and "no live row of this key" in letters[0]["reason"]
    assert json.loads(letters[0]["payload"])["after"]["id"] == 9
    # Kept again on the carried rows' own files (a row carried twice).
    committer.commit(stage(plan, [upsert("u", 2, UNAVAILABLE, 4)], "00003-0"), {"t": 4})
    assert rows(spark, catalog, name)[2] == (long_b, 4)


def moved(key: int, new_key: int, n: int, event: str, bio: str = UNAVAILABLE, op: str = "c") -> list[dict[str, Any]]:
    """A primary-key update as Debezium sends it from PostgreSQL under REPLICA IDENTITY DEFAULT: a delete of the old
    key and a create of the new one (the unchanged TOASTed value a placeholder), both with the update's source."""
    source = {"connector": "postgresql", "lsn": 1000 + len(event), "txId": event, "ts_ms": 1}
    return [{"op": "c", "before": None, "after": {"id": new_key, "bio": bio, "n": n}, "source": source},
            {"op": "d", "before": {"id": key, "bio": None, "n": None}, "after": None, "source": source}]


@pytest.mark.parametrize("format_version", ["2", "3"])
def test_a_primary_key_update_carries_unsent_values_from_the_old_key(tmp_path: Path, spark: SparkSession,
                                                                     format_version: str) -> None:
    """Without REPLICA IDENTITY FULL the new key of a primary-key update gets the old key's unchanged TOASTed
    value: from the old key's live row, or from its newer values in the same trigger; a create whose delete is in
    another trigger has nothing to take it from (a dead letter, never the placeholder)."""
    catalog, name, dead, committer, plan = people_sink(tmp_path, format_version)
    long_a, long_b, long_c = "a" * 5000, "b" * 5000, "c" * 5000
    committer.commit(stage(plan, [upsert("r", 1, long_a, 1), upsert("r", 2, long_b, 1), upsert("r", 3, long_c, 1)],
                           "00000-0"), {"t": 1})
    committer.commit(stage(plan, [
        *moved(1, 11, 5, "tx-1"),  # from the live row of the old key
        upsert("u", 2, "changed in the trigger", 2), *moved(2, 12, 6, "tx-2"),  # from the trigger's newer value
        upsert("c", 31, UNAVAILABLE, 1) | {"source": {"txId": "tx-9"}},  # its delete is in no trigger
        *moved(3, 41, 2, "tx-5"), upsert("u", 41, UNAVAILABLE, 3),  # moved, updated, moved again, updated
        *moved(41, 42, 3, "tx-6"), upsert("u", 42, UNAVAILABLE, 4),
    ], "00001-0"), {"t": 2})
    assert rows(spark, catalog, name) == {11: (long_a, 5), 12: ("changed in the trigger", 6), 42: (long_c, 4)}
    # The halves in two triggers (without spec.changes.transactions a trigger may end between them): the create
    # cannot know its old key, and is a dead letter naming the fix; the delete deletes.
    create, delete = moved(42, 13, 8, "tx-4")
    committer.commit(stage(plan, [create], "00002-0"), {"t": 3})
    committer.commit(stage(plan, [delete], "00003-0"), {"t": 4})
    assert rows(spark, catalog, name) == {11: (long_a, 5), 12: ("changed in the trigger", 6)}
    letters = {json.loads(letter["payload"])["after"]["id"]: letter["reason"]
               for letter in catalog.load_table(dead).scan().to_arrow().to_pylist()}
    assert sorted(letters) == [13, 31] and "set spec.changes.transactions" in letters[13]


def test_without_a_dead_letter_table_an_unknown_key_refuses_the_trigger(tmp_path: Path) -> None:
    catalog = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "wh").as_uri())
    name = "shop.people"
    ensure_table(catalog, name, iceberg_schema(COLUMNS), [], {}, key=list(KEY))
    writer = Writer("test/people", 1, "a1")
    committer = SinkCommitter(catalog, name, writer)
    committer.start([])
    fenced = catalog.load_table(name).current_snapshot()
    output = stage(plan_of(catalog, name, None, writer), [upsert("u", 9, UNAVAILABLE, 1)], "00000-0")
    with pytest.raises(BadInputError, match="no live row of this key"):
        committer.commit(output, {"t": 1})
    assert catalog.load_table(name).current_snapshot() == fenced


def test_many_live_rows_are_read_in_spark_tasks_alike(tmp_path: Path, spark: SparkSession,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "wh").as_uri())
    name = "shop.people"
    ensure_table(catalog, name, iceberg_schema(COLUMNS), [], {"format-version": "3"}, key=list(KEY))
    writer = Writer("test/people", 1, "a1")
    committer = SinkCommitter(catalog, name, writer)
    committer.start([])
    plan = plan_of(catalog, name, None, writer)
    for number in range(3):  # three files; each trigger moves some keys' live rows to its own file
        committer.commit(stage(plan, [upsert("u", key, f"v{number}-{key}", number) for key in range(number, 40, 2)],
                               f"0000{number}-0"), {"t": number})
    table = catalog.load_table(name)
    keys = pa.table({"id": pa.array(list(range(40)), pa.int64())})
    live = live_positions(table, table.current_snapshot(), locate_rows(table, table.current_snapshot(), keys))
    in_driver = read_live_rows(table, live, KEY, ["bio", "n"])
    monkeypatch.setattr(live_rows, "DRIVER_READ_ROWS", 0)
    in_tasks = read_live_rows(table, live, KEY, ["bio", "n"], lambda: spark)
    assert in_tasks.sort_by("id").to_pylist() == in_driver.sort_by("id").to_pylist()
    assert {row["id"]: row["bio"] for row in in_driver.to_pylist()} == \
        {key: f"v{min(2, key)}-{key}" if key < 2 else f"v{2 if key % 2 == 0 else 1}-{key}" for key in range(40)}


def test_with_equality_deletes_an_unsent_value_is_a_dead_letter(tmp_path: Path) -> None:
    """Nothing locates live rows with equality deletes: the record is a dead letter; the key's earlier change stands."""
    catalog = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "wh").as_uri())
    name, dead = "shop.people", "shop_dlq.letters"
    ensure_table(catalog, name, iceberg_schema(COLUMNS), [], {}, key=list(KEY))
    ensure_table(catalog, dead, DEAD_LETTER_SCHEMA, [], {})
    writer = Writer("test/people", 1, "a1")
    SinkCommitter(catalog, name, writer, dead_letter_identifier=dead).start([])
    plan = replace(plan_of(catalog, name, dead, writer), deletes=delete_plan(catalog.load_table(name)))
    output = stage(plan, [upsert("c", 1, "kept", 1), upsert("u", 1, UNAVAILABLE, 2)], "00000-0")
    assert output.carried is None and (output.records, output.dead_letters) == (1, 1)
    assert len(output.delete_files) == 1


def test_a_commit_retried_on_a_moved_head_carries_what_that_head_holds(spark: SparkSession,
                                                                      rest_catalog: RestCatalog) -> None:
    """A real 409 from the REST catalog: another sink commits key 1's new value between the round that was built
    and its commit; the retried round locates and carries again, on the new head, and the first round's files go."""
    direct = rest_catalog.load()
    name = f"shop_{uuid.uuid4().hex[:8]}.people"
    ensure_table(direct, name, iceberg_schema(COLUMNS), [], {"format-version": "3"}, key=list(KEY))
    other = SinkCommitter(direct, name, Writer("test/other", 1, "o1"))
    other.start([])
    other_plan = plan_of(direct, name, None, other.writer)
    other.commit(stage(other_plan, [upsert("r", 1, "original", 1), upsert("r", 2, "two", 1)], "00000-0"), {"t": 1})

    def another_sink_commits() -> None:
        other.commit(stage(other_plan, [upsert("u", 1, "foreign", 5)], "00001-0"), {"t": 2})

    with RestProxy(rest_catalog.uri, {1: "conflict"}, before_conflict=another_sink_commits) as proxy:
        catalog = load_catalog("proxied", **{**rest_catalog.properties, "uri": proxy.uri})
        mine = SinkCommitter(catalog, name, Writer("test/people", 1, "a1"))
        mine.start([])
        plan = plan_of(catalog, name, None, mine.writer)
        mine.commit(stage(plan, [upsert("u", 1, UNAVAILABLE, 9), upsert("u", 2, UNAVAILABLE, 9)], "00000-0"),
                    {"t": 1})
    assert proxy.actions == ["conflict", "forward"]
    assert rows(spark, direct, name) == {1: ("foreign", 9), 2: ("two", 9)}
    assert unreferenced_sink_files(direct.load_table(name), "test/people") == []
