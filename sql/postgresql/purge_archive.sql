-- Deletes at most $2 archived dead letters archived before $1 (Unix us), oldest first.
DELETE FROM outbox_archive WHERE seq IN (
  SELECT seq FROM outbox_archive WHERE archived_at < outbox_ts($1::bigint)
  ORDER BY archived_at, seq LIMIT $2)
