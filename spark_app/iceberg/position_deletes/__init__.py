"""Position deletes: row positions of data files deleted, written as the table's format version takes them.

Format 2: position delete files (Parquet, :mod:`.position_files`). Format 3: deletion vectors
(:mod:`.deletion_vector`) in Puffin files (:mod:`.puffin`, :mod:`.dv_files`). :mod:`.stage` writes
one commit's deletes against a table's current snapshot (merging with the live DVs);
:func:`spark_app.iceberg.internals.row_delta` commits them with data files in one snapshot.
"""
