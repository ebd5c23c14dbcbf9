"""The dead-letter table: records that could not be decoded or broke the schema, with the reason."""

from __future__ import annotations

from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

DEAD_LETTER_SCHEMA = Schema(
    NestedField(1, "sink_id", StringType(), required=True),
    NestedField(2, "sink_version", LongType(), required=True),
    NestedField(3, "payload", StringType(), required=False, doc="the raw record, or the row as JSON"),
    NestedField(4, "reason", StringType(), required=True),
    NestedField(5, "position", StringType(), required=False, doc="source position as JSON"),
    NestedField(6, "failed_at", TimestamptzType(), required=True),
)
