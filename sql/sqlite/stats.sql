-- Backlog, in the columns of outbox::sql::stats_column: pending rows (state 0) not under a
-- live lease and not scheduled; of those, the ones waiting for a retry or deferred (no lease
-- token, attempted or with a last error, available_at still to come: only settle_retry.sql
-- and a deferral in settle_release.sql, which gives a row with none a last error, leave a row
-- so); those under a live lease; the dead letters (state 2); the oldest creation time of a
-- pending row, scheduled ones left out (NULL when none); the scheduled events not due yet (no
-- lease token, never attempted, no last error, available_at still to come: only append.sql
-- writes a row so).
-- ?1 now (Unix ms).
SELECT coalesce(sum(NOT (available_at > ?1
                         AND (lease_token IS NOT NULL OR (attempts = 0 AND last_error IS NULL)))),
                0),
       coalesce(sum(lease_token IS NULL AND (attempts > 0 OR last_error IS NOT NULL)
                    AND available_at > ?1), 0),
       coalesce(sum(lease_token IS NOT NULL AND available_at > ?1), 0),
       (SELECT count(*) FROM outbox WHERE state = 2),
       min(CASE WHEN NOT (lease_token IS NULL AND attempts = 0 AND last_error IS NULL
                          AND available_at > ?1)
                THEN created_at END),
       coalesce(sum(lease_token IS NULL AND attempts = 0 AND last_error IS NULL
                    AND available_at > ?1), 0)
FROM outbox WHERE state = 0
