-- Discard, its second step: copies the dead letters dead_select.sql chose and locked to
-- outbox_archive (dead_delete.sql then removes them, in the same transaction).
-- :seqs (a JSON array of integers, sorted), :now (Unix us, the archive time).
INSERT INTO outbox_archive (seq, event_id, aggregate_type, aggregate_id, event_type, payload,
                            content_type, headers, created_at, attempts, dead_at, last_error,
                            dead_cause, replays, archived_at)
SELECT o.seq, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload,
       o.content_type, o.headers, o.created_at, o.attempts, o.dead_at, o.last_error,
       o.dead_cause, o.replays, :now
FROM JSON_TABLE(:seqs, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS c
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = c.seq
WHERE o.state = 2
