-- Dead letters (state 2) by cause key ('': dead before the schema kept one), the largest groups
-- first: the key, the count, the first and last dead_at (Unix us), the event types (sorted,
-- one per line), the oldest dead letter's event id.
-- $1 limit (groups).
SELECT dead_cause, count(*), coalesce(outbox_us(min(dead_at)), 0),
       coalesce(outbox_us(max(dead_at)), 0),
       string_agg(DISTINCT event_type, E'\n' ORDER BY event_type),
       (array_agg(event_id ORDER BY seq))[1]::text
FROM outbox WHERE state = 2
GROUP BY dead_cause ORDER BY count(*) DESC, min(seq) LIMIT $1
