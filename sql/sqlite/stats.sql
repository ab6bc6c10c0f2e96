-- Backlog: pending rows (state 0), those under a live lease, the oldest creation time, and the
-- dead letters (state 2).
-- ?1 now (Unix ms).
SELECT count(*), coalesce(sum(lease_token IS NOT NULL AND available_at > ?1), 0),
       min(created_at), (SELECT count(*) FROM outbox WHERE state = 2)
FROM outbox WHERE state = 0
