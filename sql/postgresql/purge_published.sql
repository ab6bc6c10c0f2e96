-- Deletes at most $2 published rows (state 1) published before $1 (Unix us), oldest first.
-- The state is checked again on the row itself: one replayed (made pending) since the
-- subquery chose it is kept.
DELETE FROM outbox WHERE seq IN (
  SELECT seq FROM outbox
  WHERE state = 1 AND published_at < outbox_ts($1::bigint) ORDER BY seq LIMIT $2) AND state = 1
