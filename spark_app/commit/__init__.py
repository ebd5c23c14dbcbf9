"""One trigger's changes landed as one fenced Iceberg commit (docs/protocol.md).

:mod:`.swap` (the fenced compare-and-swap every commit goes through), :mod:`.sink` (what a writer knows of its
commits, and the snapshot each commit builds), :mod:`.fence`, :mod:`.data_commit` (with :mod:`.head_writes` and
:mod:`.trigger_output`), :mod:`.dead_letters`, :mod:`.maintenance_commits`, :mod:`.expiry`, :mod:`.cleanup` and
:mod:`.references`, behind :mod:`.committer`'s ``SinkCommitter``; :mod:`.key_index` (where a keyed trigger's keys
live in the table), :mod:`.carry` (values Debezium did not send, taken from the live rows), :mod:`.keyless_locate`
(the live copies a keyless trigger removes, by position: docs/connectors.md), :mod:`.copy_on_write`,
:mod:`.partition_evolution` (``partitionBy`` evolved in the fence) and :mod:`.schema_changes` (a trigger's schema
drift as the schema changes the driver commits).
"""
