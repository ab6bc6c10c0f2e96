-- Requeue by group, its second step: the dead letters dead_select.sql chose and locked become
-- pending again, attempts reset, their replays counted.
-- :seqs (a JSON array of integers, sorted), :now (Unix us).
UPDATE JSON_TABLE(:seqs, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS c
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = c.seq
SET o.state = 0, o.attempts = 0, o.available_at = 0, o.lease_owner = NULL, o.lease_token = NULL,
    o.dead_at = NULL, o.replays = LEAST(o.replays, 2147483646) + 1, o.replayed_at = :now
WHERE o.state = 2
