"""Schema drift of keyed syncs: the table columns a record's Kafka Connect schema asks for (docs/connectors.md,
"Schema changes from the source").

* :mod:`.connect_types` maps a Connect field schema to an Iceberg column type (one table);
* :mod:`.drift` compares a record's Connect struct with the table's columns in the tasks and collects
  what would have to change (:class:`~.drift.SchemaDrift`, merged over a trigger like its other counts);
* :mod:`spark_app.commit.schema_changes` turns a trigger's drift into the schema changes the driver commits under the fence.
"""
