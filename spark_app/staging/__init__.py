"""Decoded rows to staged data files, before anything is committed.

:mod:`.pipeline` (a trigger's work units read, decoded and written in Spark tasks), :mod:`.transform` (the
optional SQL ``spec.transform``), :mod:`.keyless_collapse` (a keyless trigger as a multiset of rows),
:mod:`.writer` (rolling, partitioned Parquet writers and the files they stage), :mod:`.equality_deletes`,
:mod:`.packing` (bin packing and the merge of small staged files every planner uses), and
:mod:`.rewrite_rows` with :mod:`.lineage` (a live file's rows written again, as upkeep and copy-on-write do).
"""
