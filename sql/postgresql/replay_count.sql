-- What a replay would send (`outbox replay --dry-run`), and whether any published row is kept
-- at all (none: the relay deletes on publish, or everything was purged; a replay is refused).
-- $1 .. $5 as in replay.sql.
SELECT count(*),
       EXISTS (SELECT 1 FROM outbox WHERE state = 1)
FROM outbox
WHERE state = 1 AND created_at >= outbox_ts($1::bigint) AND created_at < outbox_ts($2::bigint)
  AND ($3::text IS NULL OR event_type = $3::text)
  AND ($4::text IS NULL OR aggregate_type = $4::text)
  AND ($5::text IS NULL OR aggregate_id = $5::text)
