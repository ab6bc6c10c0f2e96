-- The log-tailing relay settled every event committed before $2 (an LSN as bigint): the slot's
-- position moves there, never back (a relay that was paused may report an older one), except
-- from a position past the end of this server's WAL (a row from another server's history).
-- $1 slot name.
INSERT INTO outbox_tail_positions AS p (slot, settled) VALUES ($1, $2::bigint)
ON CONFLICT (slot) DO UPDATE
  SET settled = excluded.settled, updated_at = now()
  WHERE p.settled < excluded.settled
     OR p.settled > pg_catalog.pg_current_wal_flush_lsn() - '0/0'::pg_lsn
