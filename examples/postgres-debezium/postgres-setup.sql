-- The source table's side (run as its owner; wal_level = logical in postgresql.conf).
CREATE TABLE IF NOT EXISTS public.customers (
    id         bigint PRIMARY KEY,
    email      text,
    balance    numeric(12,2),
    active     boolean,
    born       date,
    updated_at timestamptz,
    avatar     bytea,
    notes      text
);
-- DEFAULT (the primary key) is enough: the sync keeps unchanged TOASTed values from its own table,
-- through primary-key updates too with the transaction metadata the connector sends (docs/connectors.md,
-- "Unchanged TOASTed values" and "Primary-key updates"). FULL makes Debezium send them itself.
ALTER TABLE public.customers REPLICA IDENTITY DEFAULT;
CREATE PUBLICATION icebergsync_customers FOR TABLE public.customers;
CREATE ROLE debezium WITH LOGIN REPLICATION PASSWORD 'REPLACE_ME';
GRANT SELECT ON public.customers TO debezium;
