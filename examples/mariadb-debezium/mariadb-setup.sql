-- Run as an administrator (e.g. `mariadb -u root < mariadb-setup.sql`) on a server whose configuration has
--   [mariadbd]
--   log_bin           = binlog
--   server_id         = 1          -- any id, unique among the servers and Debezium's database.server.id
--   binlog_format     = ROW
--   binlog_row_image  = FULL
--   binlog_expire_logs_seconds = 604800   -- longer than the connector may ever be down
--   sql_mode          = STRICT_TRANS_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION
--                       (no zero dates: Debezium cannot carry them, docs/mysql-mariadb.md)
-- The database Debezium captures (database.include.list) and the user it connects as (database.user), with the
-- grants its snapshot and binlog reading need. Replace the password, and give the same to Kafka Connect
-- (debezium-connector.json reads it from a file).
CREATE DATABASE IF NOT EXISTS shop CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE USER IF NOT EXISTS 'debezium'@'%' IDENTIFIED BY 'REPLACE_ME';
GRANT SELECT, RELOAD, SHOW DATABASES, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'debezium'@'%';
