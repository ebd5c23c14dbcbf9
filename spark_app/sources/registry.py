"""Which ``Source`` class reads each source kind of the spec (``icebergsync.spec.SOURCE_KINDS``)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from icebergsync.spec import IcebergSyncSpec
from spark_app.sources.base import SessionProvider, Source
from spark_app.sources.files import FilesSource
from spark_app.sources.generator import GeneratorSource
from spark_app.sources.kafka import KafkaSource

SOURCE_CLASSES: dict[str, type[Source]] = {
    "generator": GeneratorSource,
    "files": FilesSource,
    "kafka": KafkaSource,
}


def make_source(spark: SparkSession | SessionProvider, spec: IcebergSyncSpec) -> Source:
    """The source named by the spec."""
    return SOURCE_CLASSES[spec.source.kind](spark, spec)
