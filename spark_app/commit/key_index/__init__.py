"""The key index: where a keyed trigger's keys live in the table, derived from the table alone.

A keyed commit deletes the older row of every key it touches by position, so it must find those
rows. Nothing outside the table records them: :mod:`.locate` reads them from the snapshot the commit
swaps against, pruning with what Iceberg and Parquet record (per-file key bounds in the manifests,
per-row-group statistics, and the split-block Bloom filters the sink writes on key columns,
:mod:`spark_app.iceberg.bloom_filter`). :mod:`.file_keys` caches each data file's row-group summary in the driver by
path: a data file never changes, so a cached summary is never stale, whatever commits, expiry,
compaction or rollback did to the table in between.
"""
