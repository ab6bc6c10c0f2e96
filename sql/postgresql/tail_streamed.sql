-- Table mode's events that no relay has published yet (outbox rows in state 3, which
-- stats.sql's pending does not count), for the log-tailing store's backlog: how many were
-- written more than $2 us before $1 (a relay that keeps up deletes a row moments after its
-- commit; older ones wait for a relay that is behind or stopped, or were passed by its stream,
-- see tail_sweep.sql), and the oldest one's creation time (Unix us, 0 when none: outbox_us of
-- NULL is not NULL, so the minimum is taken of its values).
-- $1 now (Unix us), $2 the age (us).
SELECT count(*) FILTER (WHERE created_at < outbox_ts($1::bigint - $2::bigint)),
       coalesce(min(outbox_us(created_at)), 0)
FROM outbox WHERE state = 3
