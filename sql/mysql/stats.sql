-- Backlog, in the columns of outbox::sql::stats_column: pending rows (state 0) not under a
-- live lease (a locking claim writes nothing, so its rows count here); of those, the ones
-- waiting for a retry (no lease token, available_at still to come: only a retry in
-- settle_failed.sql leaves a row so); those under a live lease (leasing only); the dead letters
-- (state 2); the oldest creation time of a pending row (Unix us, 0 when none).
-- :now, :now2, :now3 (Unix us, three times).
SELECT COALESCE(SUM(NOT (lease_token IS NOT NULL AND available_at > :now)), 0),
       COALESCE(SUM(lease_token IS NULL AND available_at > :now2), 0),
       COALESCE(SUM(lease_token IS NOT NULL AND available_at > :now3), 0),
       (SELECT COUNT(*) FROM outbox FORCE INDEX (outbox_claim) WHERE state = 2),
       COALESCE(MIN(created_at), 0)
FROM outbox FORCE INDEX (outbox_claim) WHERE state = 0
