-- The log-tailing relay's slot, for the backlog and for operators: WAL bytes between the
-- slot's confirmed position and the server's current one, whether a connection streams from
-- it, the WAL it keeps (from its restart position), its wal_status ('reserved', 'extended',
-- 'unreserved': about to lose WAL past max_slot_wal_keep_size; 'lost'), and how far behind in
-- time the relay's confirmed position is as the server measures it (flush_lag of the
-- connection streaming from it, ms; 0 when caught up or none). No row: no such slot.
-- $1 slot name.
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint,
       s.active,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint,
       coalesce(s.wal_status, ''),
       coalesce((extract(epoch FROM r.flush_lag) * 1000)::bigint, 0)
FROM pg_replication_slots s
LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_name = $1
