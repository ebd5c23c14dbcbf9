"""One trigger's changes landed as one fenced Iceberg commit (docs/protocol.md).

:mod:`.committer` (the fenced compare-and-swap and every commit built on it), :mod:`.key_index` (where a keyed
trigger's keys live in the table), :mod:`.carry` (values Debezium did not send, taken from the live rows),
:mod:`.keyless_locate` (the live copies a keyless trigger removes, by position: docs/connectors.md),
:mod:`.copy_on_write`, :mod:`.partition_evolution` (``partitionBy`` evolved in the fence) and
:mod:`.schema_changes` (a trigger's schema drift as the schema changes the driver commits).
"""
