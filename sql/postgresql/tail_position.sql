-- Where the log-tailing relay's stream starts: its settled position saved for the slot (0 when
-- there is none, or when it is past the end of this server's WAL: a row from another server's
-- history, which must not make the relay skip anything), and the slot's own confirmed position
-- (0 when there is no such slot). $1 slot name.
SELECT coalesce((SELECT settled FROM outbox_tail_positions
                 WHERE slot = $1
                   AND settled <= pg_catalog.pg_current_wal_flush_lsn() - '0/0'::pg_lsn), 0),
       coalesce((SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_catalog.pg_replication_slots
                 WHERE slot_name = $1), 0)::bigint
