"""Partition-spec evolution planned from ``partitionBy``: what changes, what is no change, what is refused."""

from __future__ import annotations

import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform, VoidTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from icebergsync.errors import IncompatibleSchemaError
from spark_app.commit.partition_evolution import plan_partition_change

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "ts", TimestamptzType()),
                NestedField(3, "vendor", StringType()))
BY_DAY = PartitionSpec(PartitionField(2, 1000, DayTransform(), "ts_day"), spec_id=0)


def test_the_same_fields_in_any_order_or_under_another_name_are_no_change() -> None:
    by_day_and_vendor = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "vendor"),
                                      PartitionField(2, 1001, DayTransform(), "days_of_ts"), spec_id=0)
    assert plan_partition_change("db.t", SCHEMA, by_day_and_vendor, ["day(ts)", "vendor"], "spec.table") is None


def test_fields_are_removed_and_added_by_source_column_and_transform() -> None:
    change = plan_partition_change("db.t", SCHEMA, BY_DAY, ["bucket(4, id)"], "spec.table")
    assert change is not None
    assert [f.name for f in change.removed] == ["ts_day"]
    assert [(str(f.transform), f.name) for f in change.added] == [("bucket[4]", "id_bucket_4")]
    assert change.describe(SCHEMA) == "removed day(ts); added bucket[4](id)"


def test_a_field_removed_in_a_format_1_table_is_void_and_not_removed_again() -> None:
    voided = PartitionSpec(PartitionField(2, 1000, VoidTransform(), "ts_day"), spec_id=1)
    change = plan_partition_change("db.t", SCHEMA, voided, ["vendor"], "spec.table")
    assert change is not None and not change.removed and [f.name for f in change.added] == ["vendor"]


@pytest.mark.parametrize(("declared", "words"), [
    (["day(vendor)"], "day cannot partition column 'vendor' of type string"),
    (["bucket(4, missing)"], "cannot partition it"),
])
def test_a_layout_the_table_cannot_take_is_refused_naming_where_it_is_declared(declared: list[str], words: str) -> None:
    with pytest.raises(IncompatibleSchemaError, match=words) as refused:
        plan_partition_change("db.t", SCHEMA, BY_DAY, declared, "spec.tables[db.t]")
    assert "spec.tables[db.t].partitionBy" in str(refused.value) and "nothing was committed" in str(refused.value)
