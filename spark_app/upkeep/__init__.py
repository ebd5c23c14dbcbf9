"""Table upkeep: which files to rewrite (:mod:`.plan`), reading the deletes that apply to them
(:mod:`.deletes`) and writing them again, in the driver or as Spark tasks (:mod:`.rewrite`).

spark_app/maintenance.py decides when (after a commit, from the table's state), runs a plan and
commits it as ONE fenced ``replace`` snapshot of kind maintenance (docs/protocol.md, "Maintenance commits").
"""
