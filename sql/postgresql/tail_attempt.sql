-- The log-tailing relay claims the first batch after its stream opened: counts the claims of
-- that place (the same place again: one more; another: the first). $1 slot name, $2 position
-- (the end of the batch's first transaction, an LSN as bigint), $3 where in that transaction
-- the batch starts (its first event's index; earlier ones are settled). Returns the count,
-- this claim included.
INSERT INTO outbox_tail_attempts AS a (slot, position, within, claims)
VALUES ($1, $2::bigint, $3::bigint, 1)
ON CONFLICT (slot) DO UPDATE
  SET claims = CASE WHEN (a.position, a.within) = (excluded.position, excluded.within)
                    THEN a.claims + 1 ELSE 1 END,
      position = excluded.position, within = excluded.within
RETURNING claims
