"""The CEL rules (``x-kubernetes-validations``) the API server evaluates on an IcebergSync at apply time.

They repeat the pydantic validators of ``icebergsync.spec`` that an OpenAPI schema cannot express, so
a bad resource is refused by ``kubectl apply`` instead of failing later in the operator.
tests/e2e/test_cel_rules.py feeds the same specs to a real API server and to the model and checks
that they agree.
"""

from __future__ import annotations

from icebergsync.spec import (
    CATALOG_OR_REF_MESSAGE,
    CHANGES_NEED_FILES_OR_KAFKA_MESSAGE,
    CHANGES_NEED_KEY_MESSAGE,
    COLUMN_TYPES_MESSAGE,
    DEAD_LETTER_TEMPLATE_MESSAGE,
    EXACTLY_ONE_SOURCE_MESSAGE,
    MIN_TARGET_FILE_BYTES,
    PRIMITIVE_TYPES,
    REWRITE_EVERY_OR_AFTER_COMMITS_MESSAGE,
    SCHEMA_REQUIRED_MESSAGE,
    SOURCE_KINDS,
    TABLE_NAME_PATTERN,
    TABLES_KEY_MESSAGE,
    TABLES_NEED_TEMPLATE_MESSAGE,
    TEMPLATE_NEEDS_KAFKA_MESSAGE,
    TRANSACTIONS_NEED_DEBEZIUM_KAFKA_MESSAGE,
    ZERO_WIDTH_PATTERN,
    positive_duration_message,
)
from icebergsync.units import DURATION_PATTERN, SIZE_UNITS


def _cel_string(text: str) -> str:
    """A CEL single-quoted string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# Bytes of a size string (icebergsync.units.parse_size in CEL): the number times its unit.
_SIZE_UNIT_MAP = "{" + ", ".join(f"{_cel_string(unit)}: {float(factor)}" for unit, factor in SIZE_UNITS.items()) + "}"
_SIZE_NUMBER = _cel_string(r"^[0-9]+(\.[0-9]+)?")
_SIZE_UNIT = _cel_string("[A-Za-z]*$")


def _size_bytes(field: str) -> str:
    """CEL for the bytes of the size string ``self.<field>``."""
    return f"double(self.{field}.find({_SIZE_NUMBER})) * {_SIZE_UNIT_MAP}[self.{field}.find({_SIZE_UNIT})]"


def _positive_duration(field: str) -> dict[str, str]:
    """A duration field is above zero: matched against its pattern before ``duration()`` converts it, so a value
    that is no duration gets this rule's message, not a CEL conversion error."""
    value = f"self.{field}"
    return {"rule": f"!has({value}) || ({value}.matches({_cel_string(DURATION_PATTERN)}) && "
                    f"duration({value}) > duration('0s'))",
            "fieldPath": f".{field}", "message": positive_duration_message(field)}


# A column type is checked by the schema's pattern; this rule only says the valid types in words where the type
# is not even shaped like one (a precise regex per column is past the API server's CEL cost budget on an unbounded
# list; on spec.tables' schemas, a thousand of them, even this is: there the pattern alone speaks).
_COLUMN_TYPE = {"rule": f"self.type in [{', '.join(map(_cel_string, PRIMITIVE_TYPES))}] || "
                        "self.type.startsWith('decimal(') || self.type.startsWith('array<') || "
                        "self.type.startsWith('map<') || self.type.startsWith('struct<')",
                "fieldPath": ".type", "message": COLUMN_TYPES_MESSAGE}


CEL_RULES: dict[str, list[dict[str, str]]] = {
    "spec": [
        {
            # (spec.changes with schemaEvolution evolve: the columns come from the records' Connect schema)
            "rule": "has(self.source.generator) || (has(self.schema) && size(self.schema) > 0) || "
                    "((has(self.changes) || (has(self.source.kafka) && has(self.source.kafka.format) && "
                    "self.source.kafka.format in ['avro', 'protobuf', 'jsonschema'])) && (!has(self.schemaEvolution) || "
                    "self.schemaEvolution == 'evolve'))",
            "fieldPath": ".schema",
            "message": SCHEMA_REQUIRED_MESSAGE,
        },
        {
            "rule": "!has(self.deadLetter) || self.deadLetter.table != self.table.name",
            "fieldPath": ".deadLetter.table",
            "message": "deadLetter.table must differ from table.name",
        },
        {
            # a table name holds '{' only as a field of a template (the name's pattern)
            "rule": "!self.table.name.contains('{') || has(self.source.kafka) || has(self.source.files)",
            "fieldPath": ".table.name",
            "message": TEMPLATE_NEEDS_KAFKA_MESSAGE,
        },
        {
            "rule": "!has(self.deadLetter) || self.deadLetter.table.contains('{') == self.table.name.contains('{')",
            "fieldPath": ".deadLetter.table",
            "message": DEAD_LETTER_TEMPLATE_MESSAGE,
        },
        {
            "rule": "!has(self.tables) || size(self.tables) == 0 || self.table.name.contains('{')",
            "fieldPath": ".tables",
            "message": TABLES_NEED_TEMPLATE_MESSAGE,
        },
        {
            "rule": "!has(self.changes) || has(self.table.key)",
            "fieldPath": ".changes",
            "message": CHANGES_NEED_KEY_MESSAGE,
        },
        {
            "rule": "!has(self.changes) || !has(self.source.generator)",
            "fieldPath": ".changes",
            "message": CHANGES_NEED_FILES_OR_KAFKA_MESSAGE,
        },
        {
            "rule": "!has(self.changes) || !has(self.changes.transactions) || "
                    "(self.changes.format == 'debezium' && has(self.source.kafka))",
            "fieldPath": ".changes.transactions",
            "message": TRANSACTIONS_NEED_DEBEZIUM_KAFKA_MESSAGE,
        },
    ],
    "spec.changes.transactions": [_positive_duration("maxWait")],
    "spec.maintenance": [
        {
            "rule": f"!has(self.maxBytesPerRun) || {_size_bytes('maxBytesPerRun')} > 0.0",
            "fieldPath": ".maxBytesPerRun",
            "message": "maxBytesPerRun must be greater than zero",
        },
    ],
    "spec.maintenance.rewriteDeletes": [
        {
            "rule": "!(has(self.every) && has(self.afterCommits))",
            "message": REWRITE_EVERY_OR_AFTER_COMMITS_MESSAGE,
        },
        _positive_duration("every"),
    ],
    "spec.maintenance.expireSnapshots": [_positive_duration("every")],
    "spec.maintenance.removeOrphans": [_positive_duration("every")],
    "spec.source": [
        {
            "rule": " + ".join(f"(has(self.{kind}) ? 1 : 0)" for kind in SOURCE_KINDS) + " == 1",
            "message": EXACTLY_ONE_SOURCE_MESSAGE,
        }
    ],
    "spec.tables": [
        {"rule": f"self.all(name, size(name) <= 512 && name.matches({_cel_string(TABLE_NAME_PATTERN)}))",
         "message": TABLES_KEY_MESSAGE},
    ],
    # No rule on spec.source.kafka for "exactly one of topic and topicPattern" (TOPIC_OR_PATTERN_MESSAGE, checked
    # by the operator): topic (a string or a list) is untyped in the CRD, and the API server's CEL leaves untyped
    # fields out of an object's type, so `has(self.topic)` does not compile ("undefined field 'topic'") and the
    # API server refuses the whole CRD.
    "spec.table": [
        {"rule": "!(has(self.catalog) && has(self.catalogRef))", "message": CATALOG_OR_REF_MESSAGE},
    ],
    "spec.schema[]": [_COLUMN_TYPE],
    "spec.table.partitionBy[]": [
        {
            "rule": f"!self.matches({_cel_string(ZERO_WIDTH_PATTERN)})",
            "message": "bucket and truncate need a width of at least 1",
        }
    ],
    "spec.commit": [
        _positive_duration("interval"),
        _positive_duration("pollInterval"),
        {
            "rule": f"!has(self.targetFileSize) || {_size_bytes('targetFileSize')} >= {float(MIN_TARGET_FILE_BYTES)}",
            "fieldPath": ".targetFileSize",
            "message": "targetFileSize must be at least 1Ki",
        },
    ],
}

