-- Backlog, in the columns of outbox::sql::stats_column: pending rows (state 0) not under a
-- live lease (a locking claim writes nothing, so its rows count here); of those, the ones
-- waiting for a retry (no lease token, available_at still to come: only a retry in settle.sql
-- leaves a row so); those under a live lease (leasing only); the dead letters (state 2); the
-- oldest creation time of a pending row (Unix us, 0 when none).
-- $1 now (Unix us).
SELECT count(*) FILTER (WHERE NOT (lease_token IS NOT NULL
                                   AND available_at > outbox_ts($1::bigint))),
       count(*) FILTER (WHERE lease_token IS NULL AND available_at > outbox_ts($1::bigint)),
       count(*) FILTER (WHERE lease_token IS NOT NULL AND available_at > outbox_ts($1::bigint)),
       (SELECT count(*) FROM outbox WHERE state = 2),
       coalesce(outbox_us(min(created_at)), 0)
FROM outbox WHERE state = 0
