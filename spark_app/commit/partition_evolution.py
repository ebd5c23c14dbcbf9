"""Partition-spec evolution: ``spec.table.partitionBy`` (or a table's override) applied to an existing table.

A changed ``partitionBy`` becomes Iceberg partition-spec evolution in the fence of the version that runs
with it (one atomic commit with the claim): data written from then on is laid out by the new spec, files
written before keep theirs (every reader plans each file by its own spec). Fields are compared by their
source column and transform, so a field another engine named differently counts as the same field, and an
order change alone is not a change. A layout Iceberg cannot express (a transform the column's type does not
take, a column the table lacks) stops the sync naming it; nothing is committed.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Transaction

from icebergsync.catalog import partition_spec
from icebergsync.errors import IncompatibleSchemaError


def _key(field: PartitionField) -> tuple[int, str]:
    return field.source_id, str(field.transform)


def _column(schema: Schema, field: PartitionField) -> str:
    """The (dotted) name of the column ``field`` partitions by."""
    name = schema.find_column_name(field.source_id)
    if name is None:
        raise IncompatibleSchemaError(f"partition field {field.name!r} names column id {field.source_id}, which "
                                      "the table's schema does not have")
    return name


@dataclass(frozen=True)
class PartitionChange:
    """The fields to remove from the table's default spec (by name) and to add (as the spec names them)."""

    removed: tuple[PartitionField, ...]
    added: tuple[PartitionField, ...]

    def describe(self, schema: Schema) -> str:
        """``day(ts) -> bucket[4](id)``-style words for logs and errors."""
        def words(fields: tuple[PartitionField, ...]) -> str:
            return ", ".join(f"{field.transform}({_column(schema, field)})" for field in fields)

        parts = ([f"removed {words(self.removed)}"] if self.removed else []) + \
            ([f"added {words(self.added)}"] if self.added else [])
        return "; ".join(parts)


def plan_partition_change(table_name: str, schema: Schema, current: PartitionSpec, declared: list[str],
                          where: str) -> PartitionChange | None:
    """What turns ``current`` (the table's default spec) into the ``declared`` expressions; None when they
    already agree. Raises ``IncompatibleSchemaError`` naming ``where`` when the table cannot take them."""
    try:
        wanted = partition_spec(schema, declared)
    except ValueError as exc:
        raise IncompatibleSchemaError(
            f"table {table_name}: {where}.partitionBy {declared} cannot partition it ({exc}); nothing was committed"
        ) from exc
    live = [field for field in current.fields if str(field.transform) != "void"]  # removed in a v1 table
    kept = {_key(field) for field in live}
    added = tuple(field for field in wanted.fields if _key(field) not in kept)
    wanted_keys = {_key(field) for field in wanted.fields}
    removed = tuple(field for field in live if _key(field) not in wanted_keys)
    if not added and not removed:
        return None
    for field in added:
        source_type = schema.find_field(field.source_id).field_type
        if not field.transform.can_transform(source_type):
            raise IncompatibleSchemaError(
                f"table {table_name}: {where}.partitionBy {declared}: {field.transform} cannot partition column "
                f"{_column(schema, field)!r} of type {source_type}; nothing was committed")
    return PartitionChange(removed, added)


def apply_partition_change(transaction: Transaction, change: PartitionChange) -> None:
    """Stage ``change`` in ``transaction``: the new spec becomes the table's default (an identical earlier spec is
    reused, v2 reuses earlier field ids, v1 keeps removed fields as void transforms)."""
    schema = transaction.table_metadata.schema()
    with transaction.update_spec() as update:
        for field in change.removed:
            update.remove_field(field.name)
        for field in change.added:
            update.add_field(_column(schema, field), field.transform, field.name)
