-- Backlog: pending rows (state 0) not under a live lease, those under one (leasing only: a
-- locking claim writes nothing), the oldest creation time (Unix us, 0 when none), and the dead
-- letters (state 2).
-- :now, :now (Unix us, twice).
SELECT COALESCE(SUM(NOT (lease_token IS NOT NULL AND available_at > :now)), 0),
       COALESCE(SUM(lease_token IS NOT NULL AND available_at > :now2), 0),
       COALESCE(MIN(created_at), 0),
       (SELECT COUNT(*) FROM outbox FORCE INDEX (outbox_claim) WHERE state = 2)
FROM outbox FORCE INDEX (outbox_claim) WHERE state = 0
