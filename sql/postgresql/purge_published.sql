-- Deletes at most $2 published rows (state 1) published before $1 (Unix us), oldest first.
DELETE FROM outbox WHERE seq IN (
  SELECT seq FROM outbox
  WHERE state = 1 AND published_at < outbox_ts($1::bigint) ORDER BY seq LIMIT $2)
