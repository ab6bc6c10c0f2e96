-- A dead letter (state 2) becomes pending again, attempts reset, its replays counted (the
-- time by the server's clock).
-- $1 event_id (UUID text).
UPDATE outbox SET state = 0, attempts = 0, available_at = '-infinity', lease_owner = NULL,
                  lease_token = NULL, dead_at = NULL,
                  replays = least(replays, 2147483646) + 1, replayed_at = now()
WHERE event_id = $1::uuid AND state = 2
