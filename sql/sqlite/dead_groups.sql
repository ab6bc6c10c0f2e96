-- Dead letters (state 2) by cause key ('': dead before the schema kept one), the largest groups
-- first: the key, the count, the first and last dead_at (Unix ms), the event types (one per
-- line), the oldest dead letter's event id (SQLite takes the bare column from the row of
-- min(seq)).
-- ?1 limit (groups).
SELECT dead_cause, count(*), coalesce(min(dead_at), 0), coalesce(max(dead_at), 0),
       (SELECT group_concat(t, char(10)) FROM
          (SELECT DISTINCT event_type AS t FROM outbox i
           WHERE i.state = 2 AND i.dead_cause = o.dead_cause ORDER BY t)),
       event_id, min(seq)
FROM outbox o INDEXED BY outbox_dead_by_cause WHERE state = 2
GROUP BY dead_cause ORDER BY count(*) DESC, min(seq) LIMIT ?1
