-- Dead letters (state 2) by cause key ('': dead before the schema kept one), the largest groups
-- first: the key, the count, the first and last dead_at (Unix us), the event types (sorted,
-- one per line; cut at group_concat_max_len), the oldest dead letter's event id.
-- :limit (groups).
SELECT dead_cause, COUNT(*), COALESCE(MIN(dead_at), 0), COALESCE(MAX(dead_at), 0),
       GROUP_CONCAT(DISTINCT event_type ORDER BY event_type SEPARATOR '\n'),
       SUBSTRING_INDEX(GROUP_CONCAT(event_id ORDER BY seq SEPARATOR ','), ',', 1)
FROM outbox FORCE INDEX (outbox_by_cause) WHERE state = 2
GROUP BY dead_cause ORDER BY COUNT(*) DESC, MIN(seq) LIMIT :limit
