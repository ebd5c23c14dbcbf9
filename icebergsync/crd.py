"""The IcebergSync CustomResourceDefinition, generated from the spec model so the two never drift.

The spec schema is derived from ``icebergsync.spec.IcebergSyncSpec`` (pydantic's JSON schema made
*structural*: ``$ref`` inlined, ``anyOf`` with null folded away, titles dropped) plus defaults,
descriptions and CEL rules (``x-kubernetes-validations``) for the cross-field checks an OpenAPI
schema cannot express. The status schema comes from ``SyncStatus`` below, which the operator also
uses to write status, so what it writes always fits.

Regenerate the committed file with ``python -m icebergsync.crd > crds/icebergsync.yaml``.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from icebergsync.spec import API_GROUP, API_VERSION, KIND, IcebergSyncSpec

PLURAL = "icebergsyncs"
SINGULAR = "icebergsync"
SHORT_NAMES = ["isync"]
CATEGORIES = ["icebergsync"]
CRD_NAME = f"{PLURAL}.{API_GROUP}"

PHASES = ("Pending", "Running", "Suspended", "Degraded", "Failed", "Completed")
CONDITION_TYPES = ("Ready", "Reconciling", "Stalled")

# Descriptions of fields whose model declaration has none, keyed by their path in the spec.
FIELD_DESCRIPTIONS: dict[str, str] = {
    "spec": "Desired state: where records come from, which Iceberg table they go to and how.",
    "spec.sinkId": "Identity of this sink in the table's snapshot properties. Defaults to <namespace>/<name>.",
    "spec.source": "Where records come from: exactly one of generator, files, kafka.",
    "spec.source.generator": "Synthetic records, for demos and tests.",
    "spec.source.generator.rowsPerSecond": "Rows generated per second.",
    "spec.source.generator.maxRowsPerTrigger": "Upper bound of rows read in one trigger.",
    "spec.source.files": "A directory of files ingested in lexical path order.",
    "spec.source.files.format": "File format.",
    "spec.source.files.maxFilesPerTrigger": "Upper bound of files read in one trigger.",
    "spec.source.files.csvHeader": "Whether CSV files start with a header line.",
    "spec.source.files.secretRef": "Secret with storage credentials (e.g. s3.access-key-id), mounted as files.",
    "spec.source.kafka": "Kafka topics; offsets are recorded in the table, not in Kafka.",
    "spec.source.kafka.bootstrapServers": "Comma-separated host:port list.",
    "spec.source.kafka.topic": "A topic name or a list of topic names (checked by the operator).",
    "spec.source.kafka.maxRecordsPerTrigger": "Upper bound of records read in one trigger.",
    "spec.source.kafka.format": "Record value encoding.",
    "spec.source.kafka.options": "Extra Kafka consumer options (kafka.* keys).",
    "spec.source.kafka.secretRef": "Secret with Kafka client properties (e.g. SASL), mounted as files.",
    "spec.schema": "Columns of the table; required for the files and kafka sources.",
    "spec.schema[].name": "Column name.",
    "spec.schema[].required": "Whether the column is NOT NULL.",
    "spec.eventTimeColumn": "Column holding event time, reported as maxEventTime.",
    "spec.table": "The Iceberg table records are committed to.",
    "spec.table.catalog": "The Iceberg catalog holding the table.",
    "spec.table.catalog.type": "Catalog implementation.",
    "spec.table.catalog.uri": "Catalog URI (SQLAlchemy URL for sql, HTTP(S) URL for rest).",
    "spec.table.catalog.warehouse": "Warehouse location (path or URI).",
    "spec.table.catalog.name": "Catalog name.",
    "spec.table.catalog.properties": "Extra catalog and FileIO properties; values may use ${env:NAME}.",
    "spec.table.catalog.secretRef": "Secret whose keys are added as catalog properties (credentials).",
    "spec.table.partitionBy": "Partition transforms: col, identity(col), year|month|day|hour|void(col), "
    "bucket(N, col), truncate(N, col).",
    "spec.table.properties": "Table properties set when the table is created.",
    "spec.commit": "When the job commits.",
    "spec.commit.interval": "Time between commits, e.g. 30s, 5m, 1h30m.",
    "spec.commit.targetFileSize": "Target size of data files, e.g. 512Mi.",
    "spec.deadLetter": "Where records that cannot be decoded go.",
    "spec.deadLetter.table": "Dead-letter table (namespace.table); must differ from table.name.",
    "spec.spark": "How the Spark job runs.",
    "spec.spark.image": "Container image; defaults to the operator's configured image.",
    "spec.spark.serviceAccount": "Service account of the driver pod.",
    "spec.spark.driver": "Driver resources.",
    "spec.spark.executor": "Executor resources.",
    "spec.spark.driver.cores": "CPU cores.",
    "spec.spark.driver.memory": "Memory in JVM notation, e.g. 1g, 512m.",
    "spec.spark.executor.cores": "CPU cores per executor.",
    "spec.spark.executor.memory": "Memory per executor in JVM notation, e.g. 1g, 512m.",
    "spec.spark.executor.instances": "Number of executors.",
    "spec.spark.conf": "Extra Spark configuration.",
    "spec.suspend": "Stop the job (the application is deleted); setting it back resumes from the table.",
}

# Rules the API server evaluates at apply time, keyed by the spec path of the object they sit on.
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
            "rule": "(has(self.generator) ? 1 : 0) + (has(self.files) ? 1 : 0) + (has(self.kafka) ? 1 : 0) == 1",
            "message": "exactly one of generator, files, kafka must be set",
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

# Fields whose value may take two shapes; a structural schema cannot say "string or list" and CEL
# cannot see into untyped fields, so the operator's own validation (condition InvalidSpec) checks them.
UNTYPED_FIELDS = {"spec.source.kafka.topic"}

# Bounds the CEL cost estimator needs (the rules above are evaluated on these strings).
STRING_BOUNDS = {"spec.commit.interval": 64, "spec.commit.pollInterval": 64, "spec.table.partitionBy[]": 256}
LIST_BOUNDS = {"spec.table.partitionBy": 64}


# --------------------------------------------------------------------------------------------
# status: written by the operator, validated by the same model it is generated from
# --------------------------------------------------------------------------------------------

Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


class StatusModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Condition(StatusModel):
    """A kstatus-style condition."""

    type: Literal["Ready", "Reconciling", "Stalled"] = Field(description="Ready, Reconciling or Stalled.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$", description="One CamelCase word saying why.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: Timestamp = Field(description="When status last changed.")
    observed_generation: int | None = Field(default=None, description="Generation the condition is about.")


class LastCommit(StatusModel):
    """The newest snapshot this sink committed, as the table records it."""

    snapshot_id: int = Field(description="Iceberg snapshot id.")
    committed_at: Timestamp = Field(description="Snapshot timestamp.")
    frontier: str | None = Field(default=None, description="Source position covered, as canonical JSON.")
    records_added: int | None = Field(default=None, description="Records the snapshot added.")
    sink_version: int | None = Field(default=None, description="Sink version that wrote the snapshot.")


class SyncStatus(StatusModel):
    """Observed state of an IcebergSync, maintained by the operator."""

    phase: Literal["Pending", "Running", "Suspended", "Degraded", "Failed", "Completed"] = Field(
        default="Pending", description="Summary: Pending, Running, Suspended, Degraded, Failed or Completed."
    )
    sink_version: int | None = Field(default=None, description="Version of the current launch (fences older ones).")
    application: str | None = Field(default=None, description="Name of the current SparkApplication.")
    observed_generation: int | None = Field(default=None, description="Spec generation the operator acted on.")
    last_commit: LastCommit | None = Field(default=None, description="Newest snapshot committed by this sink.")
    seconds_since_last_commit: float | None = Field(default=None, description="Age of lastCommit when observed.")
    lag: str | None = Field(default=None, description="Source backlog reported with the last commit.")
    restarts: int = Field(default=0, description="Relaunches after failures, over the sync's lifetime.")
    consecutive_failures: int = Field(default=0, description="Failures since the last healthy commit.")
    next_retry_at: Timestamp | None = Field(default=None, description="When a failed job is relaunched.")
    conditions: list[Condition] = Field(default_factory=list, description="Ready, Reconciling, Stalled.")


# --------------------------------------------------------------------------------------------
# JSON schema -> structural OpenAPI v3 schema
# --------------------------------------------------------------------------------------------

_DROPPED_KEYS = {"title", "additionalProperties", "$defs", "properties", "items", "required", "anyOf"}
_KEY_ORDER = ("description", "type", "format", "enum", "default", "pattern", "minimum", "minLength", "maxLength",
              "maxItems", "required", "properties", "additionalProperties", "items")


def _model_classes(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every model class reachable from ``model``, by name (pydantic's ``$defs`` keys)."""
    found: dict[str, type[BaseModel]] = {model.__name__: model}
    for info in model.model_fields.values():
        for candidate in _annotation_models(info.annotation):
            if candidate.__name__ not in found:
                found.update(_model_classes(candidate))
    return found


def _annotation_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for argument in getattr(annotation, "__args__", ()) for model in _annotation_models(argument)]


def _has_model_default(model: type[BaseModel], alias: str) -> bool:
    """True when the field is a nested model that defaults to an instance (``default_factory=Commit``)."""
    for name, info in model.model_fields.items():
        if (info.alias or name) == alias:
            default = info.default_factory() if info.default_factory else info.default  # type: ignore[call-arg]
            return isinstance(default, BaseModel)
    return False


class _StructuralConverter:
    """Turns pydantic's JSON schema of one model into a structural OpenAPI v3 schema."""

    def __init__(self, model: type[BaseModel]):
        self.schema = model.model_json_schema(by_alias=True)
        self.definitions = self.schema.get("$defs", {})
        self.classes = _model_classes(model)

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in node:
            target = self.definitions[node["$ref"].rsplit("/", 1)[-1]]
            return self.resolve({**target, **{key: value for key, value in node.items() if key != "$ref"}})
        return node

    def convert(self, node: dict[str, Any], path: str, defaults_to_object: bool = False) -> dict[str, Any]:
        node = self.resolve(node)
        if "anyOf" in node:
            node = self.fold_union(node, path)
        out: dict[str, Any] = {key: value for key, value in node.items() if key not in _DROPPED_KEYS}
        if "const" in out:
            out["enum"] = [out.pop("const")]
        if out.get("default", 0) is None:
            del out["default"]
        if "properties" in node:
            model = self.classes.get(node.get("title", ""))
            out["properties"] = {
                name: self.convert(child, f"{path}.{name}", model is not None and _has_model_default(model, name))
                for name, child in node["properties"].items()
            }
            if node.get("required"):
                out["required"] = list(node["required"])
            if defaults_to_object:
                out["default"] = {}
            if model is not None and model.__doc__ and "description" not in out:
                out["description"] = model.__doc__.strip().splitlines()[0]
        elif isinstance(node.get("additionalProperties"), dict):
            out["additionalProperties"] = self.convert(node["additionalProperties"], f"{path}.*")
        if node.get("type") == "array":
            out["items"] = self.convert(node["items"], f"{path}[]")
            if "name" in out["items"].get("required", []):
                out["x-kubernetes-list-type"] = "map"
                out["x-kubernetes-list-map-keys"] = ["name"]
        if path in FIELD_DESCRIPTIONS:
            out["description"] = FIELD_DESCRIPTIONS[path]
        if path in STRING_BOUNDS:
            out["maxLength"] = STRING_BOUNDS[path]
        if path in LIST_BOUNDS:
            out["maxItems"] = LIST_BOUNDS[path]
        if path in CEL_RULES:
            out["x-kubernetes-validations"] = copy.deepcopy(CEL_RULES[path])
        return dict(sorted(out.items(), key=lambda item: (
            _KEY_ORDER.index(item[0]) if item[0] in _KEY_ORDER else len(_KEY_ORDER), item[0])))

    def fold_union(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """``X | None`` becomes X (an absent field); two real shapes become an untyped field."""
        rest = {key: value for key, value in node.items() if key != "anyOf"}
        if path in UNTYPED_FIELDS:
            return {**rest, "x-kubernetes-preserve-unknown-fields": True}
        shapes = [self.resolve(branch) for branch in node["anyOf"] if branch.get("type") != "null"]
        if len(shapes) != 1:
            raise ValueError(f"{path}: a union of {shapes} has no structural form; list it in UNTYPED_FIELDS")
        return {**shapes[0], **rest}

    def root(self, path: str) -> dict[str, Any]:
        return self.convert(self.schema, path)


def spec_schema() -> dict[str, Any]:
    """The structural OpenAPI schema of ``spec``."""
    return _StructuralConverter(IcebergSyncSpec).root("spec")


def status_schema() -> dict[str, Any]:
    """The structural OpenAPI schema of ``status``."""
    schema = _without_defaults(_StructuralConverter(SyncStatus).root("status"))
    conditions = schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return schema


def _without_defaults(node: Any) -> Any:
    """Status is written whole by the operator: the API server must not invent any of it."""
    if isinstance(node, dict):
        return {key: _without_defaults(value) for key, value in node.items() if key != "default"}
    if isinstance(node, list):
        return [_without_defaults(item) for item in node]
    return node


PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Summary phase."},
    {"name": "Version", "type": "integer", "jsonPath": ".status.sinkVersion", "description": "Current sink version."},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
     "description": "Ready condition."},
    {"name": "Last Commit", "type": "date", "jsonPath": ".status.lastCommit.committedAt",
     "description": "Time of the newest snapshot this sink committed."},
    {"name": "Lag", "type": "string", "jsonPath": ".status.lag", "description": "Source backlog."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def build_crd() -> dict[str, Any]:
    """The CustomResourceDefinition document."""
    root = {
        "type": "object",
        "description": "Keeps an Apache Iceberg table exactly-once in sync with a stream.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
        "x-kubernetes-validations": [
            {"rule": "size(self.metadata.name) <= 63", "message": "metadata.name must be at most 63 characters"}
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "icebergsync"}},
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": CATEGORIES,
            },
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def render_crd_yaml() -> str:
    """The CRD as the YAML text committed to crds/icebergsync.yaml."""
    header = "# Generated by `python -m icebergsync.crd` from icebergsync/spec.py -- do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=110)


GENERATED_CRD_PATHS = ("crds/icebergsync.yaml", "charts/icebergsync/crds/icebergsync.yaml")
GENERATED_REFERENCE_PATH = "docs/configuration.md"


def write_generated(root: Path) -> list[Path]:
    """Rewrite every file generated from the spec model (both CRD copies, the configuration reference)."""
    from icebergsync.docs_reference import render_reference

    written = []
    for relative, text in [*((path, render_crd_yaml()) for path in GENERATED_CRD_PATHS),
                           (GENERATED_REFERENCE_PATH, render_reference())]:
        target = root / relative
        target.write_text(text)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m icebergsync.crd", description="Print the IcebergSync CRD.")
    parser.add_argument("--output", "-o", help="write to this file instead of stdout")
    parser.add_argument("--write", metavar="REPO", nargs="?", const=".",
                        help="rewrite every generated file in the repository (" + ", ".join(
                            (*GENERATED_CRD_PATHS, GENERATED_REFERENCE_PATH)) + ")")
    args = parser.parse_args(argv)
    if args.write:
        for path in write_generated(Path(args.write)):
            print(f"wrote {path}")
        return 0
    text = render_crd_yaml()
    if args.output:
        with open(args.output, "w") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
