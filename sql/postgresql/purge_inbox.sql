-- Deletes at most $2 inbox records processed before $1 (Unix us), oldest first.
DELETE FROM outbox_inbox WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM outbox_inbox
  WHERE processed_at < outbox_ts($1::bigint) ORDER BY processed_at LIMIT $2))
