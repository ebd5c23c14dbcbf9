"""Tables without a primary key (an empty ``spec.table.key``): rows matched by all their columns, as a multiset.

Debezium sends such a table's changes with the whole old row as ``before`` (PostgreSQL ``REPLICA IDENTITY FULL``,
MySQL/MariaDB ``binlog_row_image=FULL``). A trigger's changes come to a net count per distinct row
(:mod:`.collapse`): copies to append, or live copies to remove; the commit removes exactly that many live rows
equal to the row, by position (:mod:`.locate`), so duplicate rows stay duplicates (docs/connectors.md).
"""
