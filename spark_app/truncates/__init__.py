"""Source truncates (Debezium's ``op: "t"``): the table emptied at the truncate's place in the source.

* :mod:`.positions` orders Debezium events by their place in the source (PostgreSQL's LSN, MySQL's and
  MariaDB's binlog file and position), the only order between a topic's partitions;
* :mod:`.replay` finds, per partition, where the events after a truncate start: the truncate's commit empties the
  table and applies every event after it, also those of a partition an earlier trigger read past it.

docs/connectors.md, "Truncates", says what a sync does with them.
"""
