"""Files as work units: slices of a text file cover every line exactly once, with its line number."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyiceberg.io import load_file_io

from spark_app.sources import file_lines
from spark_app.sources.file_lines import _slice_blocks, plan_file_units
from spark_app.sources.units import FileUnit


def numbered_lines(units: list[FileUnit]) -> list[tuple[int, bytes]]:
    io = load_file_io({}, units[0].uri)
    found = []
    for unit in units:
        for block, first in _slice_blocks(io, unit):
            for offset, line in enumerate(block.split(b"\n")[: block.count(b"\n") + (not block.endswith(b"\n"))]):
                found.append((first + offset, line))
    return found


@pytest.mark.parametrize("seed", range(12))
def test_slices_of_a_text_file_yield_every_line_once_with_its_number(
        tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    lines = [b"x" * rng.choice([0, 1, 2, 7, 40, 300]) + str(i).encode() for i in range(rng.randint(1, 400))]
    data = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
    path = tmp_path / "data.json"
    path.write_bytes(data)
    monkeypatch.setattr(file_lines, "MIN_SLICE_BYTES", rng.randint(1, 200))
    monkeypatch.setattr(file_lines, "BLOCK_BYTES", rng.randint(1, 64))
    units = plan_file_units([(path.as_uri(), len(data))], "json", cores=rng.randint(2, 9))
    assert all(isinstance(unit, FileUnit) for unit in units)
    file_units = [unit for unit in units if isinstance(unit, FileUnit)]
    assert [(u.start, u.end or len(data)) for u in file_units] == sorted((u.start, u.end or len(data)) for u in file_units)
    assert numbered_lines(file_units) == list(enumerate(lines, start=1))


def test_one_unit_per_file_when_there_are_enough_files_and_never_slices_of_gz_or_parquet() -> None:
    big = 64 << 20
    many = plan_file_units([(f"file:///in/{i}.json", big) for i in range(3)], "json", cores=2)
    assert [(u.index, u.uri, u.start, u.end) for u in many if isinstance(u, FileUnit)] == [
        (i, f"file:///in/{i}.json", 0, None) for i in range(3)]
    assert len(plan_file_units([("file:///in/a.json.gz", big)], "json", cores=2)) == 1
    assert len(plan_file_units([("file:///in/a.parquet", big)], "parquet", cores=2)) == 1
    assert len(plan_file_units([("file:///in/a.json", big)], "json", cores=2)) == 2


def test_change_orders_of_a_file_read_in_several_blocks_follow_its_lines(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Orders count records, not decoded rows: Debezium tombstones (no row) and key changes (two
    rows) in one block must not let a later block's changes sort before this block's."""
    import json

    import pyarrow as pa

    from icebergsync.spec import Column
    from spark_app.decoding.changes import ORDER_COLUMN, collapse
    from spark_app.sources.file_lines import ChangeReading, FileReader
    from spark_app.sources.units import UnitStats, order_base

    columns = (Column(name="id", type="long", required=True), Column(name="name", type="string"))

    def event(op: str, before: int | None, after: int | None, name: str = "x") -> str:
        return json.dumps({"op": op, "before": None if before is None else {"id": before},
                           "after": None if after is None else {"id": after, "name": name}})

    lines = []
    for round_ in range(40):
        lines += ["null", "null", "null", event("u", 1, 1, f"r{round_}"), "", event("u", 100 + round_, 200 + round_)]
    path = tmp_path / "changes.json"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(file_lines, "BLOCK_BYTES", 256)  # many blocks
    reader = FileReader({}, "json", None, columns, ChangeReading(columns, ("id",), "debezium"))
    unit = FileUnit(3, path.as_uri())
    changes = pa.Table.from_batches(list(reader(unit, UnitStats())))
    records = [line for line in lines if line.strip() and line != "null"]
    orders = changes.column(ORDER_COLUMN).to_pylist()
    assert orders == sorted(orders) and orders[0] >= order_base(unit)
    # Each record's order is its place among the file's records (blank lines not counted).
    numbered = [i for i, line in enumerate(line for line in lines if line.strip()) if line != "null"]
    expected = []
    for index, record in zip(numbered, records, strict=True):
        expected += [order_base(unit) + index] * (1 if json.loads(record)["before"]["id"] == 1 else 2)
    assert orders == expected
    inserts, _, _, _ = collapse(changes, ["id"])
    assert dict(zip(inserts.column("id").to_pylist(), inserts.column("name").to_pylist(), strict=True))[1] == "r39"
