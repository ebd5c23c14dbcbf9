"""The SparkSession a job runs in: local by default, or whatever spark-submit configured."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
    "spark.sql.shuffle.partitions": "8",
    "spark.python.daemon.module": "spark_app.worker_daemon",  # workers fork with the data plane imported
}
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",  # progress bars would interleave with the per-commit lines
    "spark.driver.memory": "2g",
}


def build_session(app_name: str, master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """A session with the project's defaults, then ``conf`` (the spec's ``spark.conf`` and overrides).

    With ``master`` (e.g. ``local[*]``) the session is local; without it the master comes from
    spark-submit, as when the Spark Operator launches the job.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    settings = dict(BASE_CONF)
    if master:
        builder = builder.master(master)
        settings.update(LOCAL_CONF)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("ICEBERGSYNC_SPARK_LOG_LEVEL", "WARN"))
    return session


def _import_data_plane(_: object) -> int:
    import spark_app.staging.pipeline  # noqa: F401 - loaded already when the worker forked from spark_app.worker_daemon

    return 1


def warm_up(session: SparkSession) -> SparkSession:
    """Start the worker daemon and one Python worker per core with the data plane imported, so the first
    trigger's tasks do not pay it (workers are reused across tasks)."""
    cores = session.sparkContext.defaultParallelism
    session.sparkContext.parallelize(range(cores), cores).map(_import_data_plane).sum()
    return session
