"""A sync of several tables: routing source streams to tables, each table's part of the frontier
(docs/protocol.md, "Many tables in one sync")."""
