"""The IcebergSync resource model: one definition read by the Spark job and the operator.

A document is the same YAML a user applies with kubectl. ``load_spec`` validates all of it at
once and raises ``SpecError`` listing every problem with its field path, so a job never starts
half-configured.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from icebergsync.errors import SpecError, SpecFileError
from icebergsync.table_routing import is_template, table_for, template_fields, template_matcher
from icebergsync.types.grammar import (
    NESTED_TYPES,
    PRIMITIVE_TYPES,
    ArrayOf,
    SpecType,
    StructOf,
    TypeSyntaxError,
    is_primitive,
    parse_type,
)
from icebergsync.units import DURATION_PATTERN, SIZE_PATTERN, parse_duration, parse_size

API_GROUP = "icebergsync.io"
API_VERSION = "v1alpha1"
KIND = "IcebergSync"

_PRIMITIVE_PATTERN = r"(boolean|int|long|float|double|string|binary|date|timestamp|timestamptz|decimal\(\s*[0-9]+\s*,\s*[0-9]+\s*\))"
# Exact for primitive types, the shape only for nested ones (a regular expression cannot match brackets): the
# grammar (icebergsync.types.grammar) checks them, in load_spec and in the operator.
COLUMN_TYPE_PATTERN = rf"^({_PRIMITIVE_PATTERN}|(array|map|struct)<.*>)$"
MAX_COLUMN_TYPE_LENGTH = 2048
COLUMN_TYPES_MESSAGE = (f"type must be one of {', '.join(PRIMITIVE_TYPES)}, decimal(p,s), array<T>, map<K, V> or "
                        "struct<name: T, ...> (e.g. array<string>, struct<id: long not null, tags: array<string>>)")
_FIELD_PATH = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"  # a column, or a field of a struct column: a.b
PARTITION_PATTERN = (
    rf"^\s*(identity\(\s*{_FIELD_PATH}\s*\)|(year|month|day|hour|void)\(\s*{_FIELD_PATH}\s*\)"
    rf"|(bucket|truncate)\(\s*[0-9]+\s*,\s*{_FIELD_PATH}\s*\)|{_FIELD_PATH})\s*$"
)
_PARTITION_SOURCE = re.compile(r"(?:\w+\(\s*(?:[0-9]+\s*,\s*)?)?([A-Za-z_][A-Za-z0-9_.]*)\s*\)?")


def partition_source(expression: str) -> str:
    """The source column (or struct field path, ``event.ts``) of a partitionBy expression such as ``day(event.ts)``."""
    match = _PARTITION_SOURCE.fullmatch(expression.strip())
    if match is None:
        raise ValueError(f"{expression!r} is not a partition expression")
    return match.group(1)
IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
TABLE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"
# A table name, or a template of one for a sync of many tables: the last part may hold {topic} and {N}
# (icebergsync.table_routing), the namespace is fixed.
TABLE_TEMPLATE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\.([A-Za-z0-9_]|\{topic\}|\{[1-9][0-9]?\})+$"
K8S_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

DURATION_EXAMPLES = "e.g. 500ms, 30s, 5m or 1h30m"
# What a value that misses one of these patterns must be, said instead of the pattern (parse_spec).
PATTERN_MESSAGES = {
    DURATION_PATTERN: f"must be a duration, {DURATION_EXAMPLES}",
    SIZE_PATTERN: "must be a size, e.g. 134217728, 128Mi, 512MB or 1Gi",
    COLUMN_TYPE_PATTERN: COLUMN_TYPES_MESSAGE,
}


def positive_duration_message(field: str) -> str:
    """The problem of a duration field that is zero or no duration (the model's and the CEL rule's words)."""
    return f"{field} must be a duration greater than zero ({DURATION_EXAMPLES})"


# The length bounds also let the API server's CEL cost estimator accept the rules on these strings.
Duration = Annotated[str, Field(pattern=DURATION_PATTERN, max_length=64)]
Size = Annotated[str, Field(pattern=SIZE_PATTERN, max_length=64)]
PartitionTransform = Annotated[str, Field(pattern=PARTITION_PATTERN, max_length=256)]
ZERO_WIDTH_PATTERN = r"^\s*(bucket|truncate)\(\s*0+\s*,"
MIN_TARGET_FILE_BYTES = 1024
MAX_KEY_COLUMNS = 16
CHANGE_FORMATS = ("debezium", "upsert")
CHANGES_NEED_KEY_MESSAGE = ("changes needs table.key: the columns each change upserts or deletes by ([] for a table "
                            "without a primary key: rows are matched by all their columns)")
KEYLESS_NEEDS_DEBEZIUM_MESSAGE = ("an empty key (a table without a primary key) needs changes.format debezium: a delete "
                                  "or update removes one row equal to the event's before image")
KEYLESS_NEEDS_POSITION_MESSAGE = ("an empty key (a table without a primary key) needs changes.deletes position: an "
                                  "equality delete on every column would delete every copy of a duplicated row")
KEYLESS_NEEDS_CHANGES_MESSAGE = "an empty key (a table without a primary key) needs spec.changes"
CHANGES_NEED_FILES_OR_KAFKA_MESSAGE = "changes needs the files or kafka source"
TOPIC_OR_PATTERN_MESSAGE = "set exactly one of topic and topicPattern"
JSON_TEXT_NEEDS_STRING_MESSAGE = "jsonText keeps a value's JSON text: the column's type must be string"
REGISTRY_FORMATS = ("avro", "protobuf", "jsonschema")  # formats whose records name their schema in a Schema Registry
REGISTRY_NEEDED_MESSAGE = ("formats avro, protobuf and jsonschema need schemaRegistry (where the records' schemas "
                           "are)")
TRANSACTIONS_NEED_DEBEZIUM_KAFKA_MESSAGE = ("changes.transactions needs changes.format debezium and the kafka source "
                                            "(Debezium's transaction metadata)")
TEMPLATE_NEEDS_KAFKA_MESSAGE = ("a table.name template ({topic}, {N}: one table per topic or directory) needs the "
                                "kafka or files source")
DEAD_LETTER_TEMPLATE_MESSAGE = ("with a table.name template, deadLetter.table is a template too (one dead-letter "
                                "table per table), and differs from it")
TABLES_KEY_MESSAGE = "each key of tables is a table name, namespace.table"
TABLES_NEED_TEMPLATE_MESSAGE = "tables (per-table settings) needs a table.name template ({topic} or {N})"
SCHEMA_REQUIRED_MESSAGE = ("schema is required for the files and kafka sources, except for spec.changes or a kafka "
                           "format with a schema registry (avro, protobuf, jsonschema) with schemaEvolution evolve (the table's columns then "
                           "come from the records' Kafka Connect or registry schema)")
# Iceberg refuses floating-point identifier fields (equality of floats is not a key).
KEY_TYPES_REFUSED = ("float", "double")


class Model(BaseModel):
    """Base: camelCase field names in YAML, unknown fields rejected (typos never pass silently)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class SecretRef(Model):
    """A Kubernetes Secret whose keys are mounted as files and read as extra properties."""

    name: str = Field(pattern=K8S_NAME_PATTERN, description="Name of a Secret in the sync's namespace.")


class Column(Model):
    name: str = Field(pattern=IDENTIFIER_PATTERN)
    type: str = Field(pattern=COLUMN_TYPE_PATTERN, max_length=MAX_COLUMN_TYPE_LENGTH, description=(
        "Iceberg type: a primitive (e.g. long, decimal(10,2)), array<T>, map<K, V> (K primitive) or "
        "struct<name: T, ...> to any depth, e.g. struct<id: long not null, tags: array<string>> (a struct field is "
        "optional unless not null; array elements and map values are optional)."))
    required: bool = False
    json_text: bool = False

    @field_validator("type")
    @classmethod
    def _grammatical(cls, value: str) -> str:
        try:
            parse_type(value)
        except TypeSyntaxError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _json_text_is_a_string(self) -> Column:
        if self.json_text and self.type != "string":
            raise ValueError(JSON_TEXT_NEEDS_STRING_MESSAGE)
        return self


def element_type(type_name: str) -> str | None:
    """The element type of an ``array<T>`` spec type (None: not an array)."""
    parsed = parse_type(type_name)
    return str(parsed.element) if isinstance(parsed, ArrayOf) else None


class GeneratorSource(Model):
    """Deterministic synthetic taxi-trip-like records with a unique increasing ``id`` from 0."""

    rows_per_second: int = Field(default=1000, ge=1)
    total_rows: int | None = Field(default=None, ge=0, description="Stop once this many rows are committed.")
    max_rows_per_trigger: int = Field(default=1_000_000, ge=1)

    def exhausted(self, frontier: Mapping[str, Any] | None) -> bool:
        """True when ``totalRows`` is set and the frontier (``{"next_id": N}``) has reached it."""
        position = frontier.get("next_id") if frontier is not None else None
        return self.total_rows is not None and isinstance(position, int) and position >= self.total_rows


class FilesSource(Model):
    """A directory of JSON-lines, CSV or Parquet files, ingested in lexical path order."""

    path: str = Field(min_length=1, description="Local directory, file:// or s3:// / s3a:// URI.")
    format: Literal["json", "csv", "parquet"] = "json"
    max_files_per_trigger: int = Field(default=100, ge=1)
    csv_header: bool = True
    secret_ref: SecretRef | None = None


class SchemaRegistry(Model):
    """A Confluent-compatible Schema Registry: where records in the Confluent wire format find their schemas."""

    url: str = Field(min_length=1, max_length=2048, pattern=r"^https?://")
    options: dict[str, str] = Field(default_factory=dict)
    retry_budget: Duration = "60s"

    @property
    def retry_budget_seconds(self) -> float:
        """``retryBudget`` in seconds."""
        return parse_duration(self.retry_budget)


class KafkaSource(Model):
    """Kafka topics read by the tasks with a Kafka client (librdkafka); offsets live in the table, not in Kafka."""

    bootstrap_servers: str = Field(min_length=1)
    topic: str | list[str] | None = Field(default=None, description="A topic, or a list of topics.")
    topic_pattern: str | None = Field(
        default=None, min_length=1, max_length=1024,
        description="Instead of topic: every topic whose whole name matches this regular expression (Python re "
        "syntax), checked again at every poll, so a topic created later is read from its start. Its groups name "
        "tables in a table.name template ({1}, {2}, …).",
    )
    starting_offsets: str = Field(default="earliest", description="earliest, latest, or per-partition JSON.")
    max_records_per_trigger: int = Field(default=1_000_000, ge=1)
    format: Literal["json", "avro", "protobuf", "jsonschema"] = "json"
    schema_registry: SchemaRegistry | None = None
    options: dict[str, str] = Field(default_factory=dict)
    secret_ref: SecretRef | None = None

    @field_validator("starting_offsets")
    @classmethod
    def _offsets_form(cls, value: str) -> str:
        if value in ("earliest", "latest"):
            return value
        import json

        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError("must be earliest, latest or JSON like {\"topic\":{\"0\":42}}") from exc
        if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
            raise ValueError("per-partition JSON must look like {\"topic\":{\"0\":42}}")
        return value

    @field_validator("topic_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _topic_or_pattern(self) -> KafkaSource:
        if (self.topic is None) == (self.topic_pattern is None):
            raise ValueError(TOPIC_OR_PATTERN_MESSAGE)
        if self.format in REGISTRY_FORMATS and self.schema_registry is None:
            raise ValueError(REGISTRY_NEEDED_MESSAGE)
        return self

    @property
    def pattern(self) -> re.Pattern[str] | None:
        """``topicPattern`` compiled."""
        return re.compile(self.topic_pattern) if self.topic_pattern is not None else None


class Source(Model):
    """Exactly one of the source kinds."""

    generator: GeneratorSource | None = None
    files: FilesSource | None = None
    kafka: KafkaSource | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        chosen = [name for name in SOURCE_KINDS if getattr(self, name) is not None]
        if len(chosen) != 1:
            raise ValueError(f"{EXACTLY_ONE_SOURCE_MESSAGE} (found {chosen or 'none'})")
        return self

    @property
    def kind(self) -> str:
        return next(name for name in SOURCE_KINDS if getattr(self, name) is not None)

    @property
    def registry_format(self) -> bool:
        """True when the records name their schema in a Schema Registry (``kafka.format`` avro)."""
        return self.kafka is not None and self.kafka.format in REGISTRY_FORMATS

    @property
    def bounded(self) -> bool:
        """True for a source that ends (a generator with totalRows); files and Kafka run until stopped."""
        return self.generator is not None and self.generator.total_rows is not None

    def exhausted(self, frontier: Mapping[str, Any] | None) -> bool:
        """True when a bounded source has nothing after ``frontier`` (a committed frontier of this source)."""
        return self.generator is not None and self.generator.exhausted(frontier)


# The one definition of the source kinds: the fields of ``Source`` (the CRD's rule and description,
# the error locations and the job's source registry all follow it).
SOURCE_KINDS: tuple[str, ...] = tuple(Source.model_fields)
EXACTLY_ONE_SOURCE_MESSAGE = f"exactly one of {', '.join(SOURCE_KINDS)} must be set"


CatalogType = Literal["sql", "rest"]
DEFAULT_SQL_WAREHOUSE = ".icebergsync/warehouse"
CATALOG_OR_REF_MESSAGE = "set at most one of catalog and catalogRef"
CatalogKind = Literal["IcebergCatalog", "ClusterIcebergCatalog"]


class Catalog(Model):
    type: CatalogType = "sql"
    uri: str = Field(default="sqlite:///.icebergsync/catalog.db", min_length=1)
    warehouse: str | None = None
    name: str = Field(default="icebergsync", pattern=IDENTIFIER_PATTERN)
    properties: dict[str, str] = Field(default_factory=dict)
    secret_ref: SecretRef | None = None

    @property
    def warehouse_location(self) -> str | None:
        """The warehouse asked for: the spec's; else, for a sql catalog, the local default; a rest catalog's
        server chooses its own (Nessie, for one, refuses a warehouse it does not know)."""
        return self.warehouse or (DEFAULT_SQL_WAREHOUSE if self.type == "sql" else None)


class CatalogRef(Model):
    """The catalog resource holding the table: an IcebergCatalog of the sync's namespace, or a
    ClusterIcebergCatalog that serves it."""

    kind: CatalogKind = "IcebergCatalog"
    name: str = Field(pattern=K8S_NAME_PATTERN, max_length=253)


class Table(Model):
    catalog: Catalog | None = None
    catalog_ref: CatalogRef | None = None
    name: str = Field(
        pattern=TABLE_TEMPLATE_PATTERN, max_length=512,
        description="namespace.table; or, for one table per Kafka topic (or per directory of the files source), a "
        "template whose last part holds {topic} (the topic's or directory's name) or {1}, {2}, … (groups of "
        "source.kafka.topicPattern), each made an identifier part "
        "(characters other than letters, digits and _ become _). Tables are created when their first records "
        "arrive; spec.tables overrides key, partitionBy, properties and schema per table.",
    )
    partition_by: list[PartitionTransform] = Field(default_factory=list, max_length=64)
    properties: dict[str, str] = Field(default_factory=dict)
    key: list[Annotated[str, Field(pattern=IDENTIFIER_PATTERN, max_length=256)]] | None = Field(
        default=None, max_length=MAX_KEY_COLUMNS,
        description="Key columns (each a required column of spec.schema, not float, double or an array): the table's "
        "identifier fields, by which spec.changes upserts and deletes rows. A keyed table is Iceberg format-version 2. "
        "[] declares a table without a primary key (changes.format debezium, changes.deletes position): each delete "
        "or update removes exactly one live row equal to the event's before image, so duplicates stay duplicates "
        "(docs/connectors.md, \"Tables without a primary key\").",
    )

    @field_validator("partition_by")
    @classmethod
    def _positive_widths(cls, transforms: list[str]) -> list[str]:
        if any(re.match(ZERO_WIDTH_PATTERN, transform) for transform in transforms):
            raise ValueError("bucket and truncate need a width of at least 1")
        return transforms

    @model_validator(mode="after")
    def _one_catalog(self) -> Table:
        if self.catalog is not None and self.catalog_ref is not None:
            raise ValueError(CATALOG_OR_REF_MESSAGE)
        return self

    @property
    def is_template(self) -> bool:
        """True when ``name`` is a template: one table per source stream (a sync of many tables)."""
        return is_template(self.name)

    @property
    def catalog_or_default(self) -> Catalog:
        """The inline catalog, or the local default (SQLite under .icebergsync/) when none is named.

        A ``catalogRef`` is resolved into an inline catalog by the operator before a job sees the
        spec; a local run cannot resolve it.
        """
        if self.catalog_ref is not None:
            raise SpecError([f"spec.table.catalogRef: {self.catalog_ref.kind} {self.catalog_ref.name!r} is resolved by "
                             "the operator in a cluster; a local run names its catalog inline (spec.table.catalog)"])
        return self.catalog or Catalog()


class Commit(Model):
    interval: Duration = "30s"
    target_file_size: Size = "512Mi"
    max_staged_size: Size = Field(default="1Gi", description="Commit early once this much is staged.")
    poll_interval: Duration = Field(default="1s", description="How often the source is polled for new data.")

    @property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)

    @property
    def poll_seconds(self) -> float:
        return parse_duration(self.poll_interval)

    @property
    def target_file_bytes(self) -> int:
        return parse_size(self.target_file_size)

    @property
    def max_staged_bytes(self) -> int:
        return parse_size(self.max_staged_size)

    @model_validator(mode="after")
    def _positive(self) -> Commit:
        if self.interval_seconds <= 0:
            raise ValueError(positive_duration_message("interval"))
        if self.poll_seconds <= 0:
            raise ValueError(positive_duration_message("pollInterval"))
        if self.target_file_bytes < MIN_TARGET_FILE_BYTES:
            raise ValueError("targetFileSize must be at least 1Ki")
        return self


class Transactions(Model):
    """Debezium's transaction metadata (``provide.transaction.metadata=true``): a trigger never splits a source
    transaction (docs/connectors.md, "Transaction metadata")."""

    topic: str = Field(
        min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$",
        description="The connector's transaction topic (<topic.prefix>.transaction, e.g. dbserver1.transaction): "
        "its BEGIN and END events say how many change events each source transaction has. Not one of the sync's "
        "topics.",
    )
    max_wait: Duration = Field(
        default="5m",
        description="How long a trigger waits for a transaction whose events are not all in Kafka (or whose END "
        "event is not) before it commits what it has, splitting the transaction (a WARNING and the source note "
        "transaction-split).",
    )

    @property
    def max_wait_seconds(self) -> float:
        return parse_duration(self.max_wait)

    @model_validator(mode="after")
    def _positive_wait(self) -> Transactions:
        if self.max_wait_seconds <= 0:
            raise ValueError(positive_duration_message("maxWait"))
        return self


class Changes(Model):
    """Records are changes to rows: each one upserts or deletes the row of its ``table.key``."""

    format: Literal["debezium", "upsert"] = Field(
        description="debezium: Debezium change events (c/r/u upsert after, d deletes before's key, optionally "
        "wrapped in {schema, payload}); upsert: each record is the whole new row, __deleted true deletes its "
        "key, a Kafka tombstone deletes the message key's row. See docs/connectors.md.",
    )
    deletes: Literal["position", "equality"] = Field(
        default="position",
        description="How a trigger removes the older row of each key it touches. position (the default): the "
        "rows are located in the table at commit time and deleted by position (position delete files on "
        "format-version 2 tables, deletion vectors on 3), which every Iceberg reader reads at full speed. "
        "equality: one equality delete file of the touched keys, cheaper to write and costlier to read "
        "(every reader pays for it on every scan until maintenance rewrites it away; some engines cannot "
        "read it at all). See docs/dataplane.md.",
    )
    copy_on_write_below: Size = Field(
        default="256Ki",
        description="With deletes: position, a data file smaller than this that a trigger touches is written again "
        "in the trigger's own commit (copy-on-write) instead of getting position deletes: its live rows merged with "
        "the trigger's new rows of its partition into one file, so a small partition stays one data file with no "
        "delete file after every commit. 256Ki is where compaction counts a file as that large (opening a file costs "
        "a scan about as much as reading this much of it); 0 turns it off. See docs/dataplane.md.",
    )
    transactions: Transactions | None = Field(
        default=None,
        description="Debezium's transaction metadata (provide.transaction.metadata=true; format debezium, kafka "
        "source): each trigger ends at source transaction boundaries, so a transaction's changes to several rows "
        "and tables land in one commit (one atomic cut on a SQL catalog). See docs/connectors.md.",
    )

    @property
    def copy_on_write_bytes(self) -> int:
        """Data files smaller than this are written again by a keyed commit that touches them (0: never)."""
        return parse_size(self.copy_on_write_below) if self.deletes == "position" else 0


REWRITE_EVERY_OR_AFTER_COMMITS_MESSAGE = "set at most one of every and afterCommits"
DEFAULT_MAX_REWRITE_BYTES = "1Gi"  # as commit.maxStagedSize's default: a run writes at most about one full trigger


class Compaction(Model):
    """Rewrite each partition's small data files into files of commit.targetFileSize, deletes applied."""

    enabled: bool = True
    small_file_percent: int = Field(
        default=75, ge=1, le=100,
        description="A data file smaller than this percentage of commit.targetFileSize is small.",
    )
    min_input_files: int = Field(
        default=5, ge=2, description="Compact a partition once this many of its small data files would merge by size "
        "tier: smallest first, the longest run whose largest is at most 4 times the others together (a file under 256 KiB "
        "counted as 256 KiB).",
    )
    max_extra_files_percent: int = Field(
        default=25, ge=0, description="Also compact every partition where two or more small data files would merge as "
        "soon as, across the table, the data files packing every small file would save are at least minInputFiles and "
        "exceed this percentage of the data files it would leave (a scan's cost grows with the files it opens; 0: per "
        "partition only).",
    )


class RewriteDeletes(Model):
    """Rewrite the data files deletes apply to without the deleted rows, dropping those deletes; merge each data
    file's position delete files into one."""

    enabled: bool = True
    min_delete_files: int = Field(
        default=1, ge=1, description="Rewrite a data file once at least this many equality delete files apply to it.",
    )
    deleted_rows_percent: int = Field(
        default=20, ge=1, le=100,
        description="Rewrite a data file once position deletes remove at least this percentage of its rows.",
    )
    every: Duration | None = Field(
        default=None, description="At most one run per this long, e.g. 10m (the table's state decides when one is "
        "due). At most one of every and afterCommits.",
    )
    after_commits: int | None = Field(default=None, ge=1, description="At most one run per this many data commits.")

    @model_validator(mode="after")
    def _one_spacing(self) -> RewriteDeletes:
        if self.every is not None and self.after_commits is not None:
            raise ValueError(REWRITE_EVERY_OR_AFTER_COMMITS_MESSAGE)
        if self.every is not None and parse_duration(self.every) <= 0:
            raise ValueError(positive_duration_message("every"))
        return self

    def allowed(self, commits: int, seconds: float) -> bool:
        """Whether a run may rewrite deletes ``commits`` data commits and ``seconds`` after the last one that did."""
        if self.every is not None:
            return seconds >= parse_duration(self.every)
        return self.after_commits is None or commits >= self.after_commits


class _Periodic(Model):
    """A part of maintenance that looks at the table every ``every``, for what is older than ``older_than``."""

    if TYPE_CHECKING:  # declared by each part, with its own defaults and place in the schema
        older_than: Duration
        every: Duration

    @model_validator(mode="after")
    def _positive(self) -> Self:
        if self.every_seconds <= 0:
            raise ValueError(positive_duration_message("every"))
        return self

    @property
    def older_than_seconds(self) -> float:
        return parse_duration(self.older_than)

    @property
    def every_seconds(self) -> float:
        return parse_duration(self.every)


class ExpireSnapshots(_Periodic):
    """Expire old snapshots (and delete the files only they referenced), under the sink's fence."""

    enabled: bool = True
    older_than: Duration = Field(default="1h", description="Expire snapshots older than this, e.g. 1h.")
    retain_last: int = Field(default=10, ge=1, description="Always keep this many of main's newest snapshots.")
    max_snapshots: int = Field(
        default=100, ge=1, description="Expire main's snapshots beyond this many newest ones even when younger than "
        "olderThan, as soon as a commit finds more (frequent commits would otherwise grow the metadata every reader "
        "and commit reads): down to a fifth below it (at least retainLast), so that expiry runs once every "
        "maxSnapshots/5 commits, not after every commit.",
    )
    every: Duration = Field(default="10m", description="How often the table is checked for snapshots to expire "
                            "(after a commit).")


class RemoveOrphans(_Periodic):
    """Delete the files earlier attempts of this sink staged and no snapshot references."""

    enabled: bool = True
    older_than: Duration = Field(default="1h", description="Only files older than this (a safety age), e.g. 1h.")
    every: Duration = Field(default="1h", description="How often the table's data directory is listed for them "
                            "(after a commit; also once at start-up, without the age limit).")


class RewriteManifests(Model):
    """Merge the current snapshot's small manifests (Iceberg's RewriteManifests), keeping every entry's sequence
    numbers."""

    enabled: bool = True
    max_manifests: int = Field(
        default=8, ge=1, description="Rewrite once main's current snapshot lists more than this many manifests: its "
        "manifests below the table's commit.manifest.target-size-bytes (8 MiB by default) are merged, per content "
        "and partition spec, into manifests of at most that size.",
    )


class Maintenance(Model):
    """Table maintenance the job runs between triggers, under its fence; every part is on unless turned off
    (docs/operations.md)."""

    compaction: Compaction = Field(default_factory=Compaction)
    rewrite_deletes: RewriteDeletes = Field(default_factory=RewriteDeletes)
    rewrite_manifests: RewriteManifests = Field(default_factory=RewriteManifests)
    expire_snapshots: ExpireSnapshots = Field(default_factory=ExpireSnapshots)
    remove_orphans: RemoveOrphans = Field(default_factory=RemoveOrphans)
    max_bytes_per_run: Size = Field(
        default=DEFAULT_MAX_REWRITE_BYTES, description="At most this many bytes of data files (or of manifests) "
        "rewritten per run.",
    )
    max_files_per_run: int = Field(default=1000, ge=1, description="At most this many data files (or manifests) "
                                   "rewritten per run.")

    @model_validator(mode="after")
    def _positive(self) -> Maintenance:
        if self.max_rewrite_bytes <= 0:
            raise ValueError("maxBytesPerRun must be greater than zero")
        return self

    @property
    def max_rewrite_bytes(self) -> int:
        return parse_size(self.max_bytes_per_run)


DEFAULT_METRICS_PORT = 8090


class Metrics(Model):
    """The job's Prometheus metrics, served by the Spark driver (docs/operations.md, "Metrics")."""

    enabled: bool = Field(default=True, description="Serve the job's metrics on the driver at /metrics.")
    port: int = Field(default=DEFAULT_METRICS_PORT, ge=1024, le=65535,
                      description="The driver's metrics port (the driver pod's port named metrics).")


class DeadLetter(Model):
    table: str = Field(pattern=TABLE_TEMPLATE_PATTERN, max_length=512)


class TableOverride(Model):
    """One table's own settings in a sync of many tables; what is left out comes from spec.table (and spec.schema)."""

    key: list[Annotated[str, Field(pattern=IDENTIFIER_PATTERN, max_length=256)]] | None = Field(
        default=None, max_length=MAX_KEY_COLUMNS)
    partition_by: list[PartitionTransform] | None = Field(default=None, max_length=64)
    properties: dict[str, str] = Field(default_factory=dict, description="Added to spec.table.properties.")
    schema_: list[Column] | None = Field(default=None, alias="schema")


@dataclass(frozen=True)
class TableSettings:
    """What one table of a sync is created and written with: spec.table (and spec.schema) with its override."""

    name: str
    key: list[str] | None
    partition_by: list[str]
    properties: dict[str, str]
    columns: list[Column]
    dead_letter: str | None

    @property
    def keyless(self) -> bool:
        """An empty key: a table without a primary key, its rows matched by all their columns."""
        return self.key == []


JVM_MEMORY_PATTERN = r"^[0-9]+[kmgtKMGT]?$"
# A Kubernetes label or annotation key: an optional DNS-subdomain prefix and a name of at most 63 characters.
POD_METADATA_KEY_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"


class Toleration(Model):
    """A Kubernetes toleration of the pod (core/v1 Toleration): which taints it may be scheduled onto."""

    key: str | None = Field(default=None, pattern=POD_METADATA_KEY_PATTERN,
                            description="The taint's key; unset with operator Exists tolerates every taint.")
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = Field(default=None, pattern=LABEL_VALUE_PATTERN)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, description="How long a NoExecute taint is tolerated.")

    @model_validator(mode="after")
    def _as_kubernetes_validates(self) -> Self:
        if self.key is None and self.operator != "Exists":
            raise ValueError("a toleration without a key needs operator Exists")
        if self.operator == "Exists" and self.value is not None:
            raise ValueError("a toleration with operator Exists takes no value")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect NoExecute")
        return self

    def as_kubernetes(self) -> dict[str, Any]:
        """The toleration as the pod spec takes it (camelCase, unset fields left out)."""
        return self.model_dump(by_alias=True, exclude_none=True)


class Affinity(Model):
    """The pod's affinity (core/v1 Affinity), passed to Kubernetes as written, which validates it."""

    node_affinity: dict[str, Any] | None = None
    pod_affinity: dict[str, Any] | None = None
    pod_anti_affinity: dict[str, Any] | None = None


class SparkPod(Model):
    """Size and placement of one Spark pod: cores, memory, and where Kubernetes may schedule it."""

    cores: int = Field(default=1, ge=1)
    memory: str = Field(default="1g", pattern=JVM_MEMORY_PATTERN)
    memory_overhead: str | None = Field(
        default=None, pattern=JVM_MEMORY_PATTERN,
        description="Non-heap memory of the pod (spark.driver/executor.memoryOverhead); counts toward the policy's "
        "memory cap. Default: Spark's (10% of memory, at least 384m).")
    node_selector: dict[str, str] = Field(default_factory=dict, max_length=32)
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=32,
        description="Under the operator's policy (policy.allowedTolerations): a toleration lets the pod onto "
        "nodes the admin reserved.")
    affinity: Affinity | None = None
    priority_class_name: str | None = Field(
        default=None, pattern=K8S_NAME_PATTERN,
        description="Under the operator's policy (policy.allowedPriorityClasses).")
    labels: dict[str, str] = Field(
        default_factory=dict, max_length=32,
        description="Added to the pod; keys under the operator's policy (policy.allowedPodLabels).")
    annotations: dict[str, str] = Field(
        default_factory=dict, max_length=32,
        description="Added to the pod; keys under the operator's policy (policy.allowedPodAnnotations).")

    @field_validator("labels", "annotations", "node_selector")
    @classmethod
    def _metadata_keys(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        for key, text in value.items():
            if not re.match(POD_METADATA_KEY_PATTERN, key):
                raise ValueError(f"{key!r} is not a Kubernetes label or annotation key")
            if info.field_name != "annotations" and not re.match(LABEL_VALUE_PATTERN, text):
                raise ValueError(f"{key}={text!r}: a label value is at most 63 letters, digits, '-', '_' or '.', "
                                 "starting and ending with a letter or digit")
        return value


class ExecutorPod(SparkPod):
    """Each executor's size and placement, and how many executors to run."""

    instances: int = Field(default=1, ge=1)


class Spark(Model):
    image: str | None = None
    service_account: str | None = None
    driver: SparkPod = Field(default_factory=SparkPod)
    executor: ExecutorPod = Field(default_factory=ExecutorPod)
    conf: dict[str, str] = Field(default_factory=dict)


class IcebergSyncSpec(Model):
    sink_id: str | None = Field(default=None, min_length=1, description="Defaults to the sync's name.")
    source: Source
    schema_: list[Column] = Field(
        default_factory=list, alias="schema",
        description="The table's columns (required for the files and kafka sources). May be left out for spec.changes "
        "records that carry their Kafka Connect schema with schemaEvolution evolve: the table is then created with "
        "the columns of the first records (spec.table.key required), docs/connectors.md.",
    )
    schema_evolution: Literal["evolve", "none"] = Field(
        default="evolve",
        description="How the table follows the schema change records carry (spec.changes records with their Kafka "
        "Connect schema, value.converter.schemas.enable=true). evolve (the default): a new source column becomes a new "
        "optional column, a widening Iceberg allows (int to long, float to double, a decimal's precision) is applied, "
        "a dropped column stays and is null from then on; each change is its own commit under the sink's fence, and "
        "a change Iceberg cannot express stops the sync naming the column. none: the table keeps its schema and a "
        "record with a field it lacks is a dead letter. See docs/connectors.md.",
    )
    event_time_column: str | None = Field(default=None, pattern=IDENTIFIER_PATTERN)
    transform: str | None = Field(default=None, min_length=1, description="Spark SQL over a view named source.")
    table: Table
    tables: dict[str, TableOverride] = Field(
        default_factory=dict, max_length=1000,
        description="Per-table settings of a sync of many tables (table.name a template), by table name "
        "(namespace.table as the template names it): key, partitionBy, properties (added) and schema.",
    )
    changes: Changes | None = None
    commit: Commit = Field(default_factory=Commit)
    dead_letter: DeadLetter | None = None
    maintenance: Maintenance = Field(default_factory=Maintenance)
    spark: Spark = Field(default_factory=Spark)
    metrics: Metrics = Field(default_factory=Metrics)
    suspend: bool = False

    @field_validator("tables")
    @classmethod
    def _table_names(cls, tables: dict[str, TableOverride]) -> dict[str, TableOverride]:
        bad = [name for name in tables if len(name) > 512 or not re.match(TABLE_NAME_PATTERN, name)]
        if bad:
            raise ValueError(f"{TABLES_KEY_MESSAGE} (got {shown(bad)})")
        return tables

    @field_validator("changes")
    @classmethod
    def _changes_have_a_key(cls, changes: Changes | None, info: ValidationInfo) -> Changes | None:
        table = info.data.get("table")
        if changes is not None and isinstance(table, Table) and table.key is None:
            raise ValueError(CHANGES_NEED_KEY_MESSAGE)
        source = info.data.get("source")
        if changes is not None and isinstance(source, Source) and source.kind == "generator":
            raise ValueError(CHANGES_NEED_FILES_OR_KAFKA_MESSAGE)
        return changes

    @property
    def follows_source_schema(self) -> bool:
        """True when the table's schema follows the records' schema (schemaEvolution evolve): the Connect schema of
        change records, or the registry schema of Avro records."""
        return (self.changes is not None or self.source.registry_format) and self.schema_evolution == "evolve"

    @property
    def keyed(self) -> bool:
        """True for a change-data-capture sync: rows are upserted and deleted by ``table.key``."""
        return self.changes is not None

    @model_validator(mode="after")
    def _consistent(self) -> IcebergSyncSpec:
        if not self.schema_ and self.source.kind != "generator" and not self.follows_source_schema:
            raise ValueError(SCHEMA_REQUIRED_MESSAGE)
        names = [column.name for column in self.schema_]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"schema has duplicate columns: {duplicates}")
        if self.dead_letter and self.dead_letter.table == self.table.name:
            raise ValueError("deadLetter.table must differ from table.name")
        if self.table.is_template and self.source.kafka is None and self.source.files is None:
            raise ValueError(TEMPLATE_NEEDS_KAFKA_MESSAGE)
        if self.dead_letter and is_template(self.dead_letter.table) != self.table.is_template:
            raise ValueError(DEAD_LETTER_TEMPLATE_MESSAGE)
        if self.tables and not self.table.is_template:
            raise ValueError(TABLES_NEED_TEMPLATE_MESSAGE)
        if self.changes is not None and self.changes.transactions is not None and (
                self.changes.format != "debezium" or self.source.kafka is None):
            raise ValueError(TRANSACTIONS_NEED_DEBEZIUM_KAFKA_MESSAGE)
        return self

    def keyless_stream(self, stream: str) -> bool:
        """Whether the table ``stream`` (a Kafka topic) goes to has no primary key (an empty key)."""
        pattern = self.source.kafka.pattern if self.source.kafka else None
        name = table_for(self.table.name, stream, pattern) if self.table.is_template else self.table.name
        return self.changes is not None and self.table_settings(name).keyless

    def table_settings(self, name: str, stream: str | None = None) -> TableSettings:
        """The settings of table ``name`` (for a template: the table ``stream`` is routed to, whose dead-letter
        table the deadLetter template names for the same stream)."""
        override = self.tables.get(name, TableOverride())
        dead_letter = self.dead_letter.table if self.dead_letter else None
        if dead_letter is not None and stream is not None and self.table.is_template:
            dead_letter = table_for(dead_letter, stream, self.source.kafka.pattern if self.source.kafka else None)
        return TableSettings(
            name=name,
            key=override.key if override.key is not None else self.table.key,
            partition_by=override.partition_by if override.partition_by is not None else self.table.partition_by,
            properties={**self.table.properties, **override.properties},
            columns=list(override.schema_) if override.schema_ is not None else effective_columns(self),
            dead_letter=dead_letter,
        )



# Columns of the built-in generator: taxi-trip-like, deterministic per id.
GENERATOR_COLUMNS: tuple[Column, ...] = (
    Column(name="id", type="long", required=True),
    Column(name="ts", type="timestamptz", required=True),
    Column(name="vendor", type="string", required=True),
    Column(name="pickup_zone", type="int"),
    Column(name="dropoff_zone", type="int"),
    Column(name="passenger_count", type="int"),
    Column(name="trip_distance", type="double"),
    Column(name="fare_amount", type="decimal(10,2)"),
    Column(name="tip_amount", type="double"),
    Column(name="total_amount", type="double"),
    Column(name="payment_type", type="string"),
    Column(name="rate_code", type="int"),
    Column(name="store_and_forward", type="boolean"),
    Column(name="pickup_date", type="date"),
    Column(name="notes", type="string"),
)


def effective_columns(spec: IcebergSyncSpec) -> list[Column]:
    """The declared schema, or the generator's built-in columns when none is declared (empty for change records
    that carry their schema: the table's columns come from them)."""
    return list(spec.schema_) if spec.schema_ or spec.source.kind != "generator" else list(GENERATOR_COLUMNS)


class Metadata(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = Field(pattern=K8S_NAME_PATTERN, max_length=63)
    namespace: str = Field(default="default", pattern=K8S_NAME_PATTERN)


class IcebergSync(BaseModel):
    """A whole IcebergSync document."""

    model_config = ConfigDict(populate_by_name=True, extra="allow", frozen=True)
    api_version: Literal["icebergsync.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["IcebergSync"]
    metadata: Metadata
    spec: IcebergSyncSpec

    @property
    def sink_id(self) -> str:
        return qualified_sink_id(self.metadata.namespace, self.metadata.name, self.spec.sink_id)


def qualified_sink_id(namespace: str, name: str, sink_id: str | None) -> str:
    """``<namespace>/<spec.sinkId or name>``: always under the sync's own namespace (a leading
    ``<namespace>/`` of that namespace is not doubled), so no sync can claim another namespace's sink."""
    return f"{namespace}/{(sink_id or name).removeprefix(f'{namespace}/')}"


def _sink_id_problems(sync: IcebergSync) -> list[str]:
    """A ``spec.sinkId`` naming another namespace (or holding a ``/`` below its own) is refused, clearly."""
    namespace, sink_id = sync.metadata.namespace, sync.spec.sink_id
    if sink_id is None or "/" not in sink_id.removeprefix(f"{namespace}/"):
        return []
    return [f"spec.sinkId: {shown(sink_id)} is not a sink of namespace {namespace}: the sink id is always "
            f"<namespace>/<sinkId> ({namespace}/…), so give the sink's name alone, without '/'"]


def _format_location(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in SOURCE_KINDS or not str(part).startswith("function-after"):
            path += f".{part}" if path else str(part)
    return path


MAX_SHOWN_INPUT = 120


def shown(value: object) -> str:
    """``repr(value)`` for an error message, cut to MAX_SHOWN_INPUT characters (huge input is not echoed)."""
    text = repr(value)
    if len(text) <= MAX_SHOWN_INPUT:
        return text
    return f"{text[:MAX_SHOWN_INPUT]}… ({len(text)} characters)"


def parse_spec(document: dict[str, Any]) -> IcebergSync:
    """Validate a parsed document; raise ``SpecError`` naming every invalid field."""
    try:
        sync = IcebergSync.model_validate(document)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            location = _format_location(error["loc"]) or "document"
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "string_pattern_mismatch":
                pattern = error["ctx"]["pattern"]
                message = f"{PATTERN_MESSAGES[pattern]} (got {shown(error['input'])})" if pattern in PATTERN_MESSAGES \
                    else f"{shown(error['input'])} is not valid (must match {pattern})"
            elif "input" in error and error["type"] not in ("missing", "model_type") and not isinstance(error["input"], dict):
                message = f"{message} (got {shown(error['input'])})"
            problems.append(f"{location}: {message}")
        raise SpecError(problems) from None
    problems = [*_semantic_problems(sync.spec), *_sink_id_problems(sync)]
    if problems:
        raise SpecError(problems)
    return sync


def _semantic_problems(spec: IcebergSyncSpec) -> list[str]:
    """Cross-field checks that need the parsed spec (partition source columns, event time)."""
    problems = _table_problems(effective_columns(spec), spec.table.partition_by, spec.table.key, "spec.table")
    columns = {column.name: column for column in effective_columns(spec)}
    from_records = not columns  # the columns come from the records: checked when the table is created
    problems += _template_problems(spec)
    problems += _keyless_problems(spec)
    if spec.changes is not None and spec.transform:
        problems.append("spec.transform: not supported with spec.changes (a change record is decoded into "
                        "the row it upserts or deletes; declare spec.schema as the row)")
    transactions = spec.changes.transactions if spec.changes is not None else None
    kafka = spec.source.kafka
    if transactions is not None and kafka is not None and (
            transactions.topic in ([kafka.topic] if isinstance(kafka.topic, str) else kafka.topic or [])
            or (kafka.pattern is not None and kafka.pattern.fullmatch(transactions.topic))):
        problems.append("spec.changes.transactions.topic: the transaction topic is one of spec.source.kafka's topics; "
                        "its records are not change events (leave it out of topic / topicPattern)")
    if spec.changes is not None and spec.source.registry_format:
        problems.append("spec.changes: change records in a registry format (Debezium's Avro, Protobuf or JSON "
                        "Schema converter) are not read yet; use Debezium's JSON converter with kafka format json")
    if spec.changes is not None and spec.source.files is not None and spec.source.files.format != "json":
        problems.append(f"spec.source.files.format: changes are JSON records, one per line; "
                        f"{spec.source.files.format!r} is not supported with spec.changes")
    nested = [name for name, column in columns.items() if not is_primitive(column.type)]
    if nested and spec.source.files is not None and spec.source.files.format == "csv":
        problems.append(f"spec.schema: array, map or struct column(s) {', '.join(nested)} need JSON or Parquet "
                        "records; CSV has no arrays, maps or structs")
    if spec.event_time_column and spec.event_time_column not in columns and not from_records:
        problems.append(f"spec.eventTimeColumn: column {spec.event_time_column!r} is not in the schema")
    elif spec.event_time_column in columns and not is_primitive(columns[spec.event_time_column].type):
        problems.append(f"spec.eventTimeColumn: column {spec.event_time_column!r} is "
                        f"{columns[spec.event_time_column].type}; an event time is a date or timestamp")
    return problems


def _table_problems(column_list: list[Column], partition_by: list[str], key: list[str] | None, where: str) -> list[str]:
    """A table's partition transforms and key columns checked against its columns (none: they come from the
    records, checked when the table is created)."""
    columns = {column.name: column for column in column_list}
    from_records = not columns
    problems = []
    for index, expression in enumerate(partition_by):
        column = partition_source(expression)
        if from_records:
            continue
        source_type, missing = _field_type(columns, column)
        if missing:
            problems.append(f"{where}.partitionBy[{index}]: {missing}")
        elif isinstance(source_type, NESTED_TYPES):
            problems.append(f"{where}.partitionBy[{index}]: column {column!r} is {source_type}; "
                            "an array, map or struct column cannot be a partition source")
        elif expression.strip().startswith(("year", "month", "day", "hour")) and str(source_type) not in (
            "date", "timestamp", "timestamptz"
        ):
            problems.append(
                f"{where}.partitionBy[{index}]: {expression!r} needs a date or timestamp column, "
                f"{column!r} is {source_type}"
            )
    for index, name in enumerate(key or []):
        if from_records:
            pass
        elif name not in columns:
            problems.append(f"{where}.key[{index}]: column {name!r} is not in the schema")
        elif not columns[name].required:
            problems.append(f"{where}.key[{index}]: column {name!r} must be required (a key column is never null)")
        elif columns[name].type in KEY_TYPES_REFUSED or not is_primitive(columns[name].type):
            problems.append(f"{where}.key[{index}]: column {name!r} is {columns[name].type}; "
                            "a key column cannot be float, double, an array, a map or a struct")
        if name in (key or [])[:index]:
            problems.append(f"{where}.key[{index}]: column {name!r} is listed twice")
    return problems


def _field_type(columns: Mapping[str, Column], path: str) -> tuple[SpecType | None, str]:
    """(the type of the column or struct field at ``path``, "") or (None, why there is none)."""
    name, *fields = path.split(".")
    if name not in columns:
        return None, f"column {name!r} is not in the schema"
    current = parse_type(columns[name].type)
    for depth, field_name in enumerate(fields, start=1):
        parent = ".".join([name, *fields[:depth - 1]])
        if not isinstance(current, StructOf):
            return None, (f"{parent!r} is {current}, not a struct: {path!r} names no field (a field inside an "
                          "array or a map cannot be one)")
        nested = current.field(field_name)
        if nested is None:
            return None, f"struct {parent!r} has no field {field_name!r}"
        current = nested.type
    return current, ""


def _template_problems(spec: IcebergSyncSpec) -> list[str]:
    """A table.name template's fields against the source, and each spec.tables entry against the template."""
    if not spec.table.is_template or (spec.source.kafka is None and spec.source.files is None):
        return []
    problems = []
    pattern = spec.source.kafka.pattern if spec.source.kafka is not None else None
    groups = pattern.groups if pattern is not None else 0
    for name in ("table.name", "deadLetter.table"):
        template = spec.table.name if name == "table.name" else spec.dead_letter.table if spec.dead_letter else ""
        for field in template_fields(template):
            if field != "topic" and int(field) > groups:
                problems.append(f"spec.{name}: {{{field}}} names group {field} of source.kafka.topicPattern, which "
                                f"has {groups} group(s)" + ("" if pattern is not None else
                                                            " (topic or files is set, not topicPattern)"))
    namer = template_matcher(spec.table.name)
    for name, override in spec.tables.items():
        where = f"spec.tables[{name}]"
        if not namer.fullmatch(name):
            problems.append(f"{where}: the table.name template {spec.table.name!r} never names this table")
        columns = override.schema_ if override.schema_ is not None else effective_columns(spec)
        problems += _table_problems(columns, override.partition_by if override.partition_by is not None else
                                    spec.table.partition_by,
                                    override.key if override.key is not None else spec.table.key, where)
    return problems


def _keyless_problems(spec: IcebergSyncSpec) -> list[str]:
    """An empty key (spec.table.key or a table's own) against spec.changes: a keyless table needs Debezium's
    ``before`` images and position deletes."""
    places = [("spec.table.key", spec.table.key)] + [(f"spec.tables[{name}].key", override.key)
                                                      for name, override in spec.tables.items()]
    problems = []
    for where, key in places:
        if key != []:
            continue
        if spec.changes is None:
            problems.append(f"{where}: {KEYLESS_NEEDS_CHANGES_MESSAGE}")
        elif spec.changes.format != "debezium":
            problems.append(f"{where}: {KEYLESS_NEEDS_DEBEZIUM_MESSAGE}")
        elif spec.changes.deletes != "position":
            problems.append(f"{where}: {KEYLESS_NEEDS_POSITION_MESSAGE}")
    return problems


def load_spec(path: str | Path) -> IcebergSync:
    """Read and validate an IcebergSync YAML file (the first IcebergSync document in it).

    A file that cannot be read is a ``SpecFileError``, invalid YAML a ``SpecError`` naming where; both say
    it in one line."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SpecFileError(f"cannot read the spec file {path}: {reason.lower()}; give the path of an "
                            "IcebergSync YAML file (examples/quickstart.yaml is one)") from None
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc]
    except yaml.YAMLError as exc:
        raise SpecError([f"{path}: not valid YAML{_yaml_position(exc)}: {_yaml_problem(exc)}; fix the YAML "
                         "there (indentation, a missing ':' or an unclosed quote)"]) from None
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == KIND:
            return parse_spec(document)
    raise SpecError([f"{path}: no document with kind: {KIND}"])


def _yaml_position(error: yaml.YAMLError) -> str:
    """`` at line L, column C`` of a YAML error (1-based), when it has a mark."""
    mark = getattr(error, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error's problem in one line (its message without the excerpt of the document)."""
    problem = getattr(error, "problem", None) or str(error)
    return " ".join(str(problem).split())
