-- Replay: at most $6 published rows (state 1, kept by retention keep) created in [$1, $2),
-- oldest first, become pending again with their ids (the relay sends them again in seq order,
-- so in their original order per aggregate), their replays counted. A published row is one no
-- relay touches; the state, checked again after the row lock, keeps a concurrent purge or a
-- second replay from taking it twice.
-- $1 created at or after, $2 created before (Unix us), $3 event type, $4 aggregate type,
-- $5 aggregate id (each NULL: any), $6 limit, $7 now (Unix us).
UPDATE outbox SET state = 0, attempts = 0, available_at = '-infinity', lease_owner = NULL,
                  lease_token = NULL, published_at = NULL, last_error = NULL,
                  replays = least(replays, 2147483646) + 1, replayed_at = outbox_ts($7::bigint)
WHERE seq IN (
    SELECT seq FROM outbox
    WHERE state = 1 AND created_at >= outbox_ts($1::bigint) AND created_at < outbox_ts($2::bigint)
      AND ($3::text IS NULL OR event_type = $3::text)
      AND ($4::text IS NULL OR aggregate_type = $4::text)
      AND ($5::text IS NULL OR aggregate_id = $5::text)
    ORDER BY seq LIMIT $6)
  AND state = 1
