"""What the change events a job decodes show of the Debezium settings the docs require (icebergsync/source_settings/)."""
