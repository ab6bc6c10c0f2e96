-- The log-tailing relay's slot, for the backlog: WAL bytes between the slot's confirmed
-- position and the server's current one, whether a connection streams from it, and the WAL it
-- holds back (NULL when the slot is unknown). $1 slot name.
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint,
       active,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint,
       wal_status
FROM pg_replication_slots WHERE slot_name = $1
