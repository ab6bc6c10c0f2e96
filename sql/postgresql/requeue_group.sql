-- At most $3 dead letters (state 2) of cause key $1, oldest first, become pending again,
-- attempts reset, their replays counted. A dead letter is a row no relay touches (the claim
-- takes state 0, the settle changes only rows still in state 0), so the state, checked again
-- on each row after its lock, is all that keeps two operators from requeueing one row twice.
-- $1 cause key, $2 now (Unix us), $3 limit.
UPDATE outbox SET state = 0, attempts = 0, available_at = '-infinity', lease_owner = NULL,
                  lease_token = NULL, dead_at = NULL,
                  replays = least(replays, 2147483646) + 1, replayed_at = outbox_ts($2::bigint)
WHERE seq IN (SELECT seq FROM outbox WHERE state = 2 AND dead_cause = $1 ORDER BY seq LIMIT $3)
  AND state = 2
