-- Backlog, in the columns of outbox::sql::stats_column: pending rows (state 0) not under a
-- live lease (a locking claim writes nothing, so its rows count here) and not scheduled; of
-- those, the ones waiting for a retry or deferred (no lease token, attempted or with a last
-- error, available_at still to come: only settle_failed.sql and settle_defer.sql, which gives
-- a row with none a last error, leave a row so); those under a live lease (leasing only); the
-- dead letters (state 2); the oldest creation time of a pending row, scheduled ones left out
-- (Unix us, 0 when none); the scheduled events not due yet (no lease token, never attempted,
-- no last error, available_at still to come: only append.sql writes a row so).
-- :now ... :now5 (Unix us, five times).
SELECT COALESCE(SUM(NOT (available_at > :now
                         AND (lease_token IS NOT NULL OR (attempts = 0 AND last_error IS NULL)))),
                0),
       COALESCE(SUM(lease_token IS NULL AND (attempts > 0 OR last_error IS NOT NULL)
                    AND available_at > :now2), 0),
       COALESCE(SUM(lease_token IS NOT NULL AND available_at > :now3), 0),
       (SELECT COUNT(*) FROM outbox FORCE INDEX (outbox_claim) WHERE state = 2),
       COALESCE(MIN(CASE WHEN NOT (lease_token IS NULL AND attempts = 0 AND last_error IS NULL
                                   AND available_at > :now4)
                         THEN created_at END), 0),
       COALESCE(SUM(lease_token IS NULL AND attempts = 0 AND last_error IS NULL
                    AND available_at > :now5), 0)
FROM outbox FORCE INDEX (outbox_claim) WHERE state = 0
