-- The log-tailing relay settled every event committed before $2 (an LSN as bigint): the slot's
-- position moves there, never back (a relay that was paused may report an older one).
-- $1 slot name.
INSERT INTO outbox_tail_positions AS p (slot, settled) VALUES ($1, $2::bigint)
ON CONFLICT (slot) DO UPDATE
  SET settled = greatest(p.settled, excluded.settled), updated_at = now()
  WHERE p.settled < excluded.settled
