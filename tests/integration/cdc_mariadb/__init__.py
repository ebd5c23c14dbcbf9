"""A real MariaDB streamed through Debezium's MariaDB connector and Kafka into a database-wide sync."""
