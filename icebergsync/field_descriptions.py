"""Descriptions of CRD fields whose model declaration has none, keyed by their path in the spec."""

from __future__ import annotations

from icebergsync.spec import SOURCE_KINDS

FIELD_DESCRIPTIONS: dict[str, str] = {
    "spec": "Desired state: where records come from, which Iceberg table they go to and how.",
    "spec.sinkId": (
        "Name of this sink within the sync's namespace: the sink id in the table's snapshot properties is always "
        "<namespace>/<sinkId> (a leading '<namespace>/' of the sync's own namespace is accepted; another namespace "
        "is refused). Defaults to the sync's name."),
    "spec.source": f"Where records come from: exactly one of {', '.join(SOURCE_KINDS)}.",
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
    "spec.source.kafka.format": ("Record value encoding. json: a JSON object per record. avro: Avro in the Confluent "
                                 "wire format (magic byte 0, the schema's id, the datum), its schema fetched from "
                                 "schemaRegistry. protobuf: a Protobuf message in the same wire format (with its "
                                 "message indexes). jsonschema: a JSON document in the same wire format, its JSON "
                                 "Schema in the registry. Without spec.schema the table's columns are the record schema's "
                                 "fields, and later schema versions evolve the table (schemaEvolution). "
                                 "See docs/formats.md."),
    "spec.source.kafka.schemaRegistry": ("A Confluent-compatible Schema Registry (needed by formats avro, "
                                         "protobuf and jsonschema). Credentials "
                                         "come from spec.source.kafka.secretRef under keys prefixed schema.registry. "
                                         "(schema.registry.basic.auth.user.info = user:password, "
                                         "schema.registry.bearer.auth.token, ...), never from the spec."),
    "spec.source.kafka.schemaRegistry.url": ("The registry's base URL (Confluent: http://registry:8081; Apicurio: "
                                             "http://registry:8080/apis/ccompat/v7)."),
    "spec.source.kafka.schemaRegistry.retryBudget": ("How long a task retries a registry that does not answer "
                                                     "before the sync stops (exit 8, the cause on its last line); "
                                                     "a schema id the registry does not know is a dead letter."),
    "spec.source.kafka.schemaRegistry.options": ("Settings of confluent-kafka's SchemaRegistryClient (e.g. timeout, "
                                                 "ssl.ca.location), without secrets."),
    "spec.source.kafka.options": ("Kafka client properties (security.protocol, sasl.mechanism, fetch.max.bytes, ...; the kafka. "
                                  "prefix is accepted; no credentials) and minPartitions. See docs/connectors.md."),
    "spec.source.kafka.secretRef": ("Secret with Kafka client properties and PEM files (sasl.username + sasl.password or "
                                    "sasl.jaas.config, ca.crt, tls.crt + tls.key), mounted as files."),
    "spec.schema": ("Columns of the table; required for the files and kafka sources, unless the table follows the "
                    "records' schema (spec.changes, or kafka format avro, protobuf or jsonschema, with schemaEvolution "
                    "evolve)."),
    "spec.schema[].name": "Column name.",
    "spec.schema[].required": "Whether the column is NOT NULL.",
    "spec.schema[].jsonText": ("A string column that keeps any JSON value as its text: an object or array as compact "
                               "JSON (in the record's key order), a number as written, a string as itself "
                               "(docs/formats.md)."),
    "spec.eventTimeColumn": "Column holding event time, reported as maxEventTime.",
    "spec.table": "The Iceberg table records are committed to.",
    "spec.table.catalog": ("The Iceberg catalog holding the table, declared inline: for local runs (the default is an "
                           "embedded SQLite catalog under .icebergsync/). In a cluster the operator refuses it unless "
                           "its admin allows inline catalogs; use catalogRef. At most one of catalog and catalogRef."),
    "spec.table.catalogRef": ("The catalog resource holding the table (docs/catalogs.md): an IcebergCatalog of the "
                              "sync's namespace or a ClusterIcebergCatalog that serves it. The job gets the catalog's "
                              "connection and only the Secret the catalog names."),
    "spec.table.catalogRef.kind": "IcebergCatalog (namespaced) or ClusterIcebergCatalog.",
    "spec.table.catalogRef.name": "Name of the catalog resource.",
    "spec.table.catalog.type": "Catalog implementation.",
    "spec.table.catalog.uri": "Catalog URI (SQLAlchemy URL for sql, HTTP(S) URL for rest).",
    "spec.table.catalog.warehouse": "Warehouse location (path or URI). Default: .icebergsync/warehouse for a sql catalog; none for rest (the server's own).",
    "spec.table.catalog.name": "Catalog name.",
    "spec.table.catalog.properties": ("Extra catalog and FileIO properties; values may use ${env:NAME}, expanded by the job from its own "
                                       "environment (never by the operator)."),
    "spec.table.catalog.secretRef": "Secret whose keys are added as catalog properties (credentials).",
    "spec.table.partitionBy": "Partition transforms: col, identity(col), year|month|day|hour|void(col), "
    "bucket(N, col), truncate(N, col). Changed on an existing table, it is applied as Iceberg partition-spec "
    "evolution in the fence of the version that runs with it: new data in the new layout, earlier files keep "
    "theirs; a layout the table cannot take stops the sync (exit 3) naming it.",
    "spec.table.properties": "Table properties set when the table is created.",
    "spec.table.key[]": "A key column.",
    "spec.tables.*.key": "This table's key columns (instead of spec.table.key); [] for a table without a primary key.",
    "spec.tables.*.partitionBy": "This table's partition transforms (instead of spec.table.partitionBy).",
    "spec.tables.*.schema": "This table's columns (instead of spec.schema).",
    "spec.tables.*.schema[].name": "Column name.",
    "spec.tables.*.schema[].required": "Whether the column is NOT NULL.",
    "spec.tables.*.schema[].jsonText": ("A string column that keeps any JSON value as its text (as "
                                        "spec.schema[].jsonText)."),
    "spec.changes": "Change data capture: records upsert and delete rows by spec.table.key (needs table.key, [] for "
    "a table without a primary key, and the files or kafka source). See docs/connectors.md.",
    "spec.commit": "When the job commits.",
    "spec.commit.interval": ("Longest time between commits while records arrive, e.g. 30s, 5m, 1h30m (a backlog that fills a "
                             "trigger to maxStagedSize or the source's per-trigger cap commits at once)."),
    "spec.commit.targetFileSize": "Target size of data files, e.g. 512Mi.",
    "spec.maintenance": "Table upkeep the job runs between triggers, under its fence, when the table's state calls "
    "for it: compaction, rewriting deletes, manifest rewrites, snapshot expiry and orphan removal, each on unless its "
    "enabled is false. "
    "See docs/operations.md, Maintenance.",
    "spec.maintenance.compaction.enabled": "Compact small data files.",
    "spec.maintenance.rewriteDeletes.enabled": "Rewrite data files deletes apply to, and merge position delete files.",
    "spec.maintenance.rewriteManifests.enabled": "Merge small manifests.",
    "spec.maintenance.expireSnapshots.enabled": "Expire old snapshots.",
    "spec.maintenance.removeOrphans.enabled": "Delete earlier attempts' unreferenced staged files periodically "
    "(a new attempt always deletes them once at start-up).",
    "spec.deadLetter": "Where records that cannot be decoded go.",
    "spec.deadLetter.table": "Dead-letter table (namespace.table); must differ from table.name. With a table.name template, a template too (e.g. lake.{1}_dead_letters): one dead-letter table per table.",
    "spec.spark": "How the Spark job runs.",
    "spec.spark.image": "Container image; defaults to the operator's configured image.",
    "spec.spark.serviceAccount": "Service account of the driver pod.",
    "spec.spark.driver": "Driver size and placement.",
    "spec.spark.executor": "Executor size and placement.",
    "spec.spark.driver.cores": "CPU cores.",
    "spec.spark.driver.memory": "Memory in JVM notation, e.g. 1g, 512m.",
    "spec.spark.executor.cores": "CPU cores per executor.",
    "spec.spark.executor.memory": "Memory per executor in JVM notation, e.g. 1g, 512m.",
    "spec.spark.executor.instances": "Number of executors.",
    "spec.spark.driver.nodeSelector": "Node labels the pod must be scheduled on (Kubernetes' nodeSelector).",
    "spec.spark.driver.tolerations[].operator": "Equal (the taint's value must match) or Exists.",
    "spec.spark.driver.tolerations[].value": "The taint's value (with operator Equal).",
    "spec.spark.driver.tolerations[].effect": "The taint effect tolerated; unset: every effect.",
    "spec.spark.driver.affinity.nodeAffinity": "A Kubernetes NodeAffinity, as written.",
    "spec.spark.driver.affinity.podAffinity": "A Kubernetes PodAffinity, as written.",
    "spec.spark.driver.affinity.podAntiAffinity": "A Kubernetes PodAntiAffinity, as written.",
    "spec.spark.executor.nodeSelector": "Node labels the pod must be scheduled on (Kubernetes' nodeSelector).",
    "spec.spark.executor.tolerations[].operator": "Equal (the taint's value must match) or Exists.",
    "spec.spark.executor.tolerations[].value": "The taint's value (with operator Equal).",
    "spec.spark.executor.tolerations[].effect": "The taint effect tolerated; unset: every effect.",
    "spec.spark.executor.affinity.nodeAffinity": "A Kubernetes NodeAffinity, as written.",
    "spec.spark.executor.affinity.podAffinity": "A Kubernetes PodAffinity, as written.",
    "spec.spark.executor.affinity.podAntiAffinity": "A Kubernetes PodAntiAffinity, as written.",
    "spec.spark.conf": ("Extra Spark configuration; a key set here replaces the product's default for it (without "
                        "transform: extraJavaOptions -XX:TieredStopAtLevel=1, see docs/dataplane.md)."),
    "spec.suspend": "Stop the job (the application is deleted); setting it back resumes from the table.",
}
