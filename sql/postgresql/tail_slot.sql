-- The log-tailing relay's logical replication slot (pgoutput), created when missing (outside
-- a transaction: PostgreSQL refuses to create one in a transaction that wrote). $1 slot name.
-- Returns whether the slot was already there (read first: the select list runs left to
-- right), and the slot's confirmed position (LSN text).
SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
       coalesce((SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1),
                (SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')))
