"""Schema Registry formats: a registered schema (Avro, Protobuf, JSON Schema) as the table's column types."""
