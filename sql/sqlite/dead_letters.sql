-- Dead letters (state 2), oldest first: the message columns of outbox::sql::column, then
-- last_error and dead_at (Unix ms).
-- ?1 limit.
SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload, headers, attempts,
       created_at, content_type, coalesce(last_error, ''), coalesce(dead_at, 0)
FROM outbox WHERE state = 2 ORDER BY seq LIMIT ?1
