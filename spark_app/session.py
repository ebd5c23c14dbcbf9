"""The SparkSession a job runs in: local by default, or whatever spark-submit configured."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
    "spark.sql.shuffle.partitions": "8",
}
KAFKA_CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13"
# Set (to 1/true) in an image whose Spark already has the connectors' jars.
JARS_PRESENT_ENV = "ICEBERGSYNC_SPARK_JARS_PRESENT"
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
    import spark_app.pipeline  # noqa: F401 - the import is the point: workers are reused with it loaded

    return 1


def warm_up(session: SparkSession) -> SparkSession:
    """Start one Python worker per core with the data plane imported, so the first trigger's tasks do not pay it
    (workers are reused across tasks)."""
    cores = session.sparkContext.defaultParallelism
    session.sparkContext.parallelize(range(cores), cores).map(_import_data_plane).sum()
    return session


def connector_conf(source_kind: str, conf: dict[str, str]) -> dict[str, str]:
    """``spark.jars.packages`` for the Kafka connector matching this Spark, unless it is already there.

    "There" means: the image says so (``ICEBERGSYNC_SPARK_JARS_PRESENT``), the conf names it in
    ``spark.jars``, ``spark.jars.packages`` or ``spark.driver.extraClassPath``, or Spark's own jars
    directory holds it. Packages are resolved when the driver JVM starts, so this fetches only for
    local runs (the Python process starts the JVM); under spark-submit the image must carry the jars.
    """
    if source_kind != "kafka" or os.environ.get(JARS_PRESENT_ENV, "").lower() in ("1", "true", "yes"):
        return {}
    given = " ".join(conf.get(key, "") for key in ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath"))
    if "spark-sql-kafka-0-10" in given:
        return {}
    homes = [Path(pyspark.__file__).parent, *([Path(os.environ["SPARK_HOME"])] if os.environ.get("SPARK_HOME") else [])]
    if any(any((home / "jars").glob("spark-sql-kafka-0-10_*.jar")) for home in homes):
        return {}
    packages = [p for p in conf.get("spark.jars.packages", "").split(",") if p.strip()]
    return {"spark.jars.packages": ",".join([*packages, f"{KAFKA_CONNECTOR}:{pyspark.__version__}"])}
