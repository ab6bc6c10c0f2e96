-- Replay: the published rows replay_select.sql chose become pending again with their ids (the
-- relay sends them again in seq order, so in their original order per aggregate), their
-- replays counted. A published row is one no relay touches; the state, checked again on the
-- row, keeps a concurrent purge or a second replay from taking it twice.
-- :seqs (a JSON array of integers, sorted), :now (Unix us).
UPDATE JSON_TABLE(:seqs, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS c
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = c.seq
SET o.state = 0, o.attempts = 0, o.available_at = 0, o.lease_owner = NULL, o.lease_token = NULL,
    o.published_at = NULL, o.last_error = NULL, o.replays = LEAST(o.replays, 2147483646) + 1,
    o.replayed_at = :now
WHERE o.state = 1
