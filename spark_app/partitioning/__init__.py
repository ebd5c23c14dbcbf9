"""A table's partitioning as the spec declares it: evolved in the sink's fence when ``partitionBy`` changes."""
