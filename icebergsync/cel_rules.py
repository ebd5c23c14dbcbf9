"""The CEL rules (``x-kubernetes-validations``) the API server evaluates on an IcebergSync at apply time.

They repeat the pydantic validators of ``icebergsync.spec`` that an OpenAPI schema cannot express, so
a bad resource is refused by ``kubectl apply`` instead of failing later in the operator.
"""

from __future__ import annotations

from icebergsync.spec import EXACTLY_ONE_SOURCE_MESSAGE, SOURCE_KINDS

CEL_RULES: dict[str, list[dict[str, str]]] = {
    "spec": [
        {
            "rule": "has(self.source.generator) || (has(self.schema) && size(self.schema) > 0)",
            "fieldPath": ".schema",
            "message": "schema is required for the files and kafka sources",
        },
        {
            "rule": "!has(self.deadLetter) || self.deadLetter.table != self.table.name",
            "fieldPath": ".deadLetter.table",
            "message": "deadLetter.table must differ from table.name",
        },
    ],
    "spec.source": [
        {
            "rule": " + ".join(f"(has(self.{kind}) ? 1 : 0)" for kind in SOURCE_KINDS) + " == 1",
            "message": EXACTLY_ONE_SOURCE_MESSAGE,
        }
    ],
    "spec.table.partitionBy[]": [
        {
            "rule": "!self.matches('^\\\\s*(bucket|truncate)\\\\(\\\\s*0+\\\\s*,')",
            "message": "bucket and truncate need a width of at least 1",
        }
    ],
    "spec.commit": [
        {
            "rule": "!has(self.interval) || duration(self.interval) > duration('0s')",
            "fieldPath": ".interval",
            "message": "interval must be greater than zero",
        },
        {
            "rule": "!has(self.pollInterval) || duration(self.pollInterval) > duration('0s')",
            "fieldPath": ".pollInterval",
            "message": "pollInterval must be greater than zero",
        },
    ],
}

# Bounds the CEL cost estimator needs (the rules above are evaluated on these strings).
STRING_BOUNDS = {"spec.commit.interval": 64, "spec.commit.pollInterval": 64, "spec.table.partitionBy[]": 256}
LIST_BOUNDS = {"spec.table.partitionBy": 64}
