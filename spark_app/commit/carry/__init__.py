"""Carrying values Debezium did not send (unchanged TOASTed columns) from the table's live rows.

An upsert whose ``_isync_carry`` still names columns after the trigger's collapse
(:func:`spark_app.decoding.changes.collapse`) takes those values from its key's live row in the snapshot the
commit swaps against: the key index locates the key's rows (:mod:`spark_app.commit.key_index`),
:mod:`.live_rows` drops the ones the snapshot's position deletes and deletion vectors delete and
reads the columns at the live positions (in Spark tasks when many), and :mod:`.fill` completes the
rows or turns them into dead letters (no live row: the key is unknown to the table). The committer
does this in every round of its compare-and-swap, so the values always come from the snapshot the
commit lands on (docs/connectors.md, "Unchanged TOASTed values").
"""
