"""Bad input on real Spark: whole bad files, strict decoding, positions, and the stop without a dead-letter table."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icebergsync.errors import EXIT_BAD_INPUT, BadInputError
from icebergsync.spec import IcebergSync
from spark_app.job.loop import SyncJob
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    make_sync,
    run_job_process,
    sink_commits,
    sync_document,
    table_ids,
    write_spec,
)

SCHEMA = [{"name": "id", "type": "long", "required": True}, {"name": "item", "type": "string"}]
PRICED = [{"name": "id", "type": "long", "required": True}, {"name": "price", "type": "double"}]


def new_inbox(directory: Path) -> Path:
    inbox = directory / "inbox"
    inbox.mkdir()
    return inbox


def lines(*records: object) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"


def test_without_a_dead_letter_table_a_bad_record_stops_the_job_with_one_line_and_exit_65(tmp_path: Path) -> None:
    inbox = new_inbox(tmp_path)
    (inbox / "0001.json").write_text(lines({"id": 1, "item": "a"}, {"id": 2, "item": "b"}))
    (inbox / "0002.json").write_text(lines({"id": 3, "item": "c"}, "{not json", {"id": 4, "item": "d"}))
    document = sync_document(tmp_path, {"files": {"path": str(inbox), "maxFilesPerTrigger": 1}}, schema=SCHEMA)
    status, output = run_job_process(write_spec(tmp_path, document), 1)
    assert status == EXIT_BAD_INPUT, output
    errors = [line for line in output.splitlines() if " ERROR " in line]
    assert len(errors) == 1, output
    assert "bad input at" in errors[0] and '"file":' in errors[0] and "0002.json" in errors[0]
    assert '"line":2' in errors[0] and "malformed JSON" in errors[0] and "spec.deadLetter is not set" in errors[0]
    assert "Traceback" not in output and "Py4JJavaError" not in output
    # The first file's trigger is committed; nothing of the bad file's trigger is, and no staged file is left.
    sync = make_sync(tmp_path, {"files": {"path": str(inbox)}}, schema=SCHEMA)
    table = catalog_of(sync).load_table("sales.orders")
    assert table_ids(table) == [1, 2]
    assert sink_commits(table, "test/orders")[-1].frontier == {"after": "0001.json"}
    staged = [p for p in (tmp_path / "warehouse").rglob("*.parquet") if "isync-" in p.name]
    assert len(staged) == 1, staged



def dead_letters(catalog: Catalog) -> list[dict[str, Any]]:
    rows = catalog.load_table("sales.orders_dlq").scan().to_arrow().to_pylist()
    for row in rows:
        row["position"] = json.loads(row["position"])
    return sorted(rows, key=lambda row: (row["position"]["file"], row["position"].get("line", row["position"].get("row", -1))))


def run_until_frontier(sync: IcebergSync, spark: SparkSession, last: str) -> Catalog:
    catalog = catalog_of(sync)

    def reached() -> bool:
        commits = sink_commits(catalog.load_table("sales.orders"), "test/orders")
        return bool(commits) and commits[-1].frontier == {"after": last}

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(reached, f"the frontier after {last}")
    return catalog


def test_bad_parquet_files_are_one_dead_letter_each_and_the_frontier_moves_past_them(
    tmp_path: Path, spark: SparkSession
) -> None:
    inbox = new_inbox(tmp_path)
    schema = PRICED
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "price": pa.array([1.5, 2.5], pa.float32())}),
                   inbox / "0001.parquet")
    (inbox / "0002.parquet").write_text("id,price\n3,4.5\n")
    pq.write_table(pa.table({"id": pa.array([4], pa.int64()), "price": [1.0], "coupon": ["X"]}), inbox / "0003.parquet")
    pq.write_table(pa.table({"id": pa.array([5], pa.int64()), "price": pa.array([{"a": 1}])}), inbox / "0004.parquet")
    # A different type for the same column in another file (Spark would pick one file's schema for all).
    pq.write_table(pa.table({"id": pa.array([6, 7, 8], pa.int64()), "price": ["6.5", "seven", "8.5"]}),
                   inbox / "0005.parquet")
    sync = make_sync(tmp_path, {"files": {"path": str(inbox), "format": "parquet"}}, schema=schema,
                     deadLetter={"table": "sales.orders_dlq"})
    catalog = run_until_frontier(sync, spark, "0005.parquet")
    assert table_ids(catalog.load_table("sales.orders")) == [1, 2, 6, 8]
    dead = dead_letters(catalog)
    assert [(Path(row["position"]["file"]).name, row["position"].get("row")) for row in dead] == [
        ("0002.parquet", None), ("0003.parquet", None), ("0004.parquet", None), ("0005.parquet", 1)]
    assert dead[0]["reason"].startswith("not a Parquet file")
    assert dead[1]["reason"] == "Parquet file has columns that spec.schema does not declare: ['coupon']"
    assert dead[2]["reason"] == "Parquet column(s) cannot be read as declared: price is struct<a: int64>, not double"
    assert dead[3]["reason"] == "field price: value seven is not a double"
    assert [row["payload"] for row in dead[:3]] == [None, None, None]
    assert json.loads(dead[3]["payload"]) == {"id": 7, "price": "seven"}  # the row as read


def test_bad_text_files_are_one_dead_letter_each_and_records_carry_their_line(
    tmp_path: Path, spark: SparkSession
) -> None:
    inbox = new_inbox(tmp_path)
    schema = PRICED
    (inbox / "0001.csv").write_text("id,price\n1,1.5\n\n2,x\n3,3.5\n")
    (inbox / "0002.csv").write_text("price,id\n4.5,4\n")
    (inbox / "0003.csv.gz").write_bytes(gzip.compress(b"id,price\n5,5.5\n6,6.5\n")[:-12])  # truncated
    (inbox / "0004.csv.gz").write_bytes(gzip.compress(b"id,price\n7,7.5\n"))
    sync = make_sync(tmp_path, {"files": {"path": str(inbox), "format": "csv"}}, schema=schema,
                     deadLetter={"table": "sales.orders_dlq"})
    catalog = run_until_frontier(sync, spark, "0004.csv.gz")
    assert table_ids(catalog.load_table("sales.orders")) == [1, 3, 7]
    dead = dead_letters(catalog)
    assert [(Path(row["position"]["file"]).name, row["position"].get("line")) for row in dead] == [
        ("0001.csv", 4), ("0002.csv", None), ("0003.csv.gz", None)]
    assert [row["payload"] for row in dead] == ["2,x", None, None]
    assert dead[0]["reason"] == "CSV row does not match the schema: field price: value x is not a double"
    assert dead[1]["reason"] == "CSV header ['price', 'id'] does not match the declared columns ['id', 'price']"
    assert dead[2]["reason"].startswith("corrupt gzip file")

    json_inbox = tmp_path / "json"
    json_inbox.mkdir()
    (json_inbox / "a.json").write_text(lines({"id": 1}, "", "{broken", {"id": 2}))
    json_sync = make_sync(tmp_path / "json-sync", {"files": {"path": str(json_inbox)}}, schema=schema,
                          deadLetter={"table": "sales.orders_dlq"})
    json_catalog = run_until_frontier(json_sync, spark, "a.json")
    assert table_ids(json_catalog.load_table("sales.orders")) == [1, 2]
    assert [(row["position"]["line"], row["reason"]) for row in dead_letters(json_catalog)] == [(3, "malformed JSON")]


def test_without_a_dead_letter_table_a_bad_file_stops_the_job_before_anything_is_committed(
    tmp_path: Path, spark: SparkSession
) -> None:
    inbox = new_inbox(tmp_path)
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), inbox / "0001.parquet")
    (inbox / "0002.parquet").write_text("not parquet")
    sync = make_sync(tmp_path, {"files": {"path": str(inbox), "format": "parquet"}}, schema=SCHEMA)
    with pytest.raises(BadInputError, match=r'bad input at \{"file":"file://.*0002.parquet"\}: not a Parquet file'):
        SyncJob(sync, 1, spark).run()
    table = catalog_of(sync).load_table("sales.orders")
    assert [c.kind for c in sink_commits(table, "test/orders")] == ["fence"]
    assert table_ids(table) == []
    assert [p for p in (tmp_path / "warehouse").rglob("*.parquet") if "isync-" in p.name] == []
