-- Dead letters (state 2), oldest first: the message columns of outbox::sql::column, then
-- last_error, dead_at (Unix us), the cause key, the replays and the last replay (Unix us, 0:
-- none).
-- $1 limit.
SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload_bytes, headers::text,
       attempts, outbox_us(created_at), content_type, coalesce(last_error, ''),
       coalesce(outbox_us(dead_at), 0), dead_cause, replays, coalesce(outbox_us(replayed_at), 0)
FROM outbox WHERE state = 2 ORDER BY seq LIMIT $1
