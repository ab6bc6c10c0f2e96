-- A dead letter (state 2) becomes pending again, attempts reset, its replays counted (the
-- time by the clock of the host, Unix ms).
-- ?1 event_id.
UPDATE outbox SET state = 0, attempts = 0, available_at = 0, lease_owner = NULL,
                  lease_token = NULL, dead_at = NULL, replays = replays + 1,
                  replayed_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
WHERE event_id = ?1 AND state = 2
