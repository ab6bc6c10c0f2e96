-- Dead letters (state 2), oldest first: the message columns of outbox::sql::column, then
-- last_error, dead_at (Unix us), the cause key, the replays and the last replay (Unix us, 0:
-- none).
-- :limit.
SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload, headers, attempts,
       created_at, content_type, COALESCE(last_error, ''), COALESCE(dead_at, 0), dead_cause,
       replays, COALESCE(replayed_at, 0)
FROM outbox FORCE INDEX (outbox_claim)
WHERE state = 2 ORDER BY seq LIMIT :limit
