"""A sync of several tables: whether a catalog commits several tables as one cut, and each table's status
(docs/protocol.md, "Many tables in one sync"); the routing of streams to tables is icebergsync.table_routing."""
