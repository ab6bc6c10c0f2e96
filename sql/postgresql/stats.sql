-- Backlog: pending rows (state 0) not under a live lease, those under one (leasing only: a
-- locking claim writes nothing), the oldest creation time (Unix us, 0 when none), and the dead
-- letters (state 2).
-- $1 now (Unix us).
SELECT count(*) FILTER (WHERE NOT (lease_token IS NOT NULL
                                   AND available_at > outbox_ts($1::bigint))),
       count(*) FILTER (WHERE lease_token IS NOT NULL AND available_at > outbox_ts($1::bigint)),
       coalesce(outbox_us(min(created_at)), 0),
       (SELECT count(*) FROM outbox WHERE state = 2)
FROM outbox WHERE state = 0
