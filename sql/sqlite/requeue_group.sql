-- At most ?3 dead letters (state 2) of cause key ?1, oldest first, become pending again,
-- attempts reset, their replays counted. Run in a BEGIN IMMEDIATE transaction (one writer at
-- a time); a dead letter is a row no relay touches (the claim takes state 0, the settle
-- changes only rows still in state 0).
-- ?1 cause key, ?2 now (Unix ms), ?3 limit.
UPDATE outbox SET state = 0, attempts = 0, available_at = 0, lease_owner = NULL,
                  lease_token = NULL, dead_at = NULL, replays = replays + 1, replayed_at = ?2
WHERE seq IN (SELECT seq FROM outbox INDEXED BY outbox_dead_by_cause
              WHERE state = 2 AND dead_cause = ?1 ORDER BY seq LIMIT ?3)
  AND state = 2
