-- The log-tailing relay claims the first batch after its stream opened: counts the claims of
-- that position (the same position again: one more; another: the first). $1 slot name,
-- $2 position (LSN as bigint). Returns the count, this claim included.
INSERT INTO outbox_tail_attempts AS a (slot, position, claims) VALUES ($1, $2::bigint, 1)
ON CONFLICT (slot) DO UPDATE
  SET claims = CASE WHEN a.position = excluded.position THEN a.claims + 1 ELSE 1 END,
      position = excluded.position
RETURNING claims
