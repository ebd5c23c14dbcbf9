"""The Spark settings a sync runs with: the product's defaults under the spec's own ``spark.conf``.

Shared by the job (local runs: ``icebergsync run``) and the operator (the SparkApplication's
``sparkConf``), so both launch the same JVMs.
"""

from __future__ import annotations

from icebergsync.spec import IcebergSyncSpec

# Without spec.transform the JVMs only schedule work units and move bytes (task results, a keyed
# sync's routed Arrow blocks); the rows are read, decoded and written in the Python tasks. The optimizing
# compiler (C2) then compiles Spark's start-up and scheduling paths for nothing: measured on
# local[2], C1 only cut the JVM's CPU by 35-40% (3-5 CPU-s a run) and start-up by ~0.4 s.
# With spec.transform the JVM runs the SQL, where C2 pays for itself: no default then.
QUICK_JIT_OPTIONS = "-XX:TieredStopAtLevel=1"


def spark_conf(spec: IcebergSyncSpec) -> dict[str, str]:
    """``spec.spark.conf`` over the defaults (a key the spec sets replaces the default whole), and the pods'
    ``memoryOverhead`` fields over both."""
    defaults = {} if spec.transform else {
        "spark.driver.extraJavaOptions": QUICK_JIT_OPTIONS,
        "spark.executor.extraJavaOptions": QUICK_JIT_OPTIONS,
    }
    overheads = {f"spark.{role}.memoryOverhead": pod.memory_overhead
                 for role, pod in (("driver", spec.spark.driver), ("executor", spec.spark.executor))
                 if pod.memory_overhead}
    return {**defaults, **spec.spark.conf, **overheads}
