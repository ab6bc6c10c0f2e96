-- Where the log-tailing relay's stream starts: its settled position saved for the slot and its
-- progress inside the transaction after it (0s when there is none, or when the position is
-- past the end of this server's WAL: a row from another server's history, which must not make
-- the relay skip anything), and the slot's own confirmed position (0 when there is no such
-- slot). $1 slot name. One row: settled, confirmed, within_end, within_events.
SELECT coalesce(p.settled, 0), coalesce((SELECT confirmed_flush_lsn - '0/0'::pg_lsn
                                         FROM pg_catalog.pg_replication_slots
                                         WHERE slot_name = $1), 0)::bigint,
       coalesce(p.within_end, 0), coalesce(p.within_events, 0)
FROM (SELECT 1) AS one
LEFT JOIN outbox_tail_positions p
  ON p.slot = $1
 AND p.settled <= pg_catalog.pg_current_wal_flush_lsn() - '0/0'::pg_lsn
 AND p.within_end <= pg_catalog.pg_current_wal_flush_lsn() - '0/0'::pg_lsn
