-- When the next waiting row falls due (concepts::due_telling_store): the earliest available_at
-- after now of a pending row held by no claim (a scheduled event, a retry), Unix us, 0 when
-- none (outbox_us of NULL is not NULL: its greatest() drops the NULL). The predicate
-- "available_at > '-infinity'" is spelled out so the planner reads the small partial index
-- outbox_waiting_by_aggregate (0003) rather than every pending row.
-- $1 now (Unix us).
SELECT CASE WHEN w.due IS NULL THEN 0 ELSE outbox_us(w.due) END
FROM (SELECT min(available_at) AS due FROM outbox
      WHERE state = 0 AND available_at > '-infinity' AND lease_token IS NULL
        AND available_at > outbox_ts($1::bigint)) w
