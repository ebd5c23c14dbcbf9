"""The Debezium settings the docs require, as far as a sync can tell them from the change events it reads."""
