-- The log-tailing relay settled every event committed before $2 (an LSN as bigint), and the
-- first $4 events of the transaction that ends at $3 (0, 0: none). The row moves forward only
-- (a relay that was paused may report an older position), except from a position past the
-- end of this server's WAL (a row from another server's history). $1 slot name.
INSERT INTO outbox_tail_positions AS p (slot, settled, within_end, within_events)
VALUES ($1, $2::bigint, $3::bigint, $4::bigint)
ON CONFLICT (slot) DO UPDATE
  SET settled = excluded.settled, within_end = excluded.within_end,
      within_events = excluded.within_events, updated_at = now()
  WHERE (p.settled, p.within_end, p.within_events)
          < (excluded.settled, excluded.within_end, excluded.within_events)
     OR p.settled > pg_catalog.pg_current_wal_flush_lsn() - '0/0'::pg_lsn
     OR p.within_end > pg_catalog.pg_current_wal_flush_lsn() - '0/0'::pg_lsn
