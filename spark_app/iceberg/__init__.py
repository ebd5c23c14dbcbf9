"""Iceberg and its file formats, below everything that syncs: every use of pyiceberg's private API and every
file the sink reads or writes byte by byte.

:mod:`.internals` (commits with requirements of our own, manifests, row deltas, rewrites, live files),
:mod:`.cut` (several tables' transactions as one catalog change, docs/protocol.md "Many tables in one sync"),
:mod:`.position_deletes` (position delete files, deletion vectors, Puffin), :mod:`.applied_deletes` (which
rows a table's delete files remove), :mod:`.parquet_stitch` and :mod:`.thrift_compact` (Parquet files joined
by their row groups), :mod:`.bloom_filter` and :mod:`.parquet_hash` (Parquet's split-block Bloom filters).
"""
