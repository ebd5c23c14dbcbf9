"""Data-plane test fixtures (Kafka, REST catalog, S3). Filled in by the infra work."""
