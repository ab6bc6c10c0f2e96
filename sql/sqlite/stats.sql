-- Backlog, in the columns of outbox::sql::stats_column: pending rows (state 0) not under a
-- live lease; of those, the ones waiting for a retry (no lease token, available_at still to
-- come: only settle_retry.sql leaves a row so); those under a live lease; the dead letters
-- (state 2); the oldest creation time of a pending row (NULL when none).
-- ?1 now (Unix ms).
SELECT coalesce(sum(NOT (lease_token IS NOT NULL AND available_at > ?1)), 0),
       coalesce(sum(lease_token IS NULL AND available_at > ?1), 0),
       coalesce(sum(lease_token IS NOT NULL AND available_at > ?1), 0),
       (SELECT count(*) FROM outbox WHERE state = 2), min(created_at)
FROM outbox WHERE state = 0
