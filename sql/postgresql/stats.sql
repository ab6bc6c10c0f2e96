-- Backlog, in the columns of outbox::sql::stats_column: pending rows (state 0) not under a
-- live lease (a locking claim writes nothing, so its rows count here) and not scheduled; of
-- those, the ones waiting for a retry or deferred (no lease token, attempted or with a last
-- error, available_at still to come: only a retry or a deferral in settle.sql, which gives a
-- row with none a last error, leaves a row so); those under a live lease (leasing only); the
-- dead letters (state 2); the oldest creation time of a pending row, scheduled ones left out
-- (Unix us, 0 when none); the scheduled events not due yet (no lease token, never attempted,
-- no last error, available_at still to come: only append.sql, park.sql and tail_rescue.sql
-- write a row so, for an event the writer scheduled).
-- $1 now (Unix us).
SELECT count(*) FILTER (WHERE NOT (available_at > outbox_ts($1::bigint)
                                   AND (lease_token IS NOT NULL
                                        OR (attempts = 0 AND last_error IS NULL)))),
       count(*) FILTER (WHERE lease_token IS NULL AND (attempts > 0 OR last_error IS NOT NULL)
                          AND available_at > outbox_ts($1::bigint)),
       count(*) FILTER (WHERE lease_token IS NOT NULL AND available_at > outbox_ts($1::bigint)),
       (SELECT count(*) FROM outbox WHERE state = 2),
       coalesce(outbox_us(min(created_at) FILTER (
                  WHERE NOT (lease_token IS NULL AND attempts = 0 AND last_error IS NULL
                             AND available_at > outbox_ts($1::bigint)))), 0),
       count(*) FILTER (WHERE lease_token IS NULL AND attempts = 0 AND last_error IS NULL
                          AND available_at > outbox_ts($1::bigint))
FROM outbox WHERE state = 0
