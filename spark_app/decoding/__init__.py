"""Records to rows: strict decoding of change events and plain records into the declared columns.

:mod:`.arrow_decode` (append syncs' JSON and CSV records), :mod:`.changes` (change envelopes of keyed and
keyless syncs, collapsed per key), :mod:`.deadletter` (the dead-letter columns and reasons), :mod:`.float32`,
:mod:`.schema_drift` (a record's Kafka Connect schema against the table's columns), :mod:`.settings_seen`
(signs of a Debezium setting not in use), :mod:`.source_positions` (a Debezium event's place in the source,
the order truncates are applied in: docs/connectors.md, "Truncates") and :mod:`.row_identity` (when two rows
of a keyless table are the same row).
"""
