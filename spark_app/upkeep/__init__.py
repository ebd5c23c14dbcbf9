"""Table upkeep: which files to rewrite (:mod:`.plan`, :mod:`.manifests`) and writing them again, in the
driver or as Spark tasks (:mod:`.rewrite`), the deletes that apply read by :mod:`spark_app.iceberg.applied_deletes`.

:mod:`.runner` decides when (after a commit, from the table's state), runs a plan and commits it as ONE fenced
``replace`` snapshot of kind maintenance (docs/protocol.md, "Maintenance commits").
"""
