-- The log-tailing relay's table mode: streamed rows (state 3) whose events the broker
-- confirmed are deleted, at most one batch at a time. $1 their event ids (uuid[] text).
DELETE FROM outbox WHERE event_id = ANY($1::uuid[]) AND state = 3
