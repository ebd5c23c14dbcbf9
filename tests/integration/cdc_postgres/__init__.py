"""The real CDC pipeline of the suite: PostgreSQL -> Debezium -> Kafka -> a keyed IcebergSync."""
