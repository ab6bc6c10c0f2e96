-- A dead letter (state 2) becomes pending again, attempts reset, its replays counted (the
-- time by the server clock, Unix us).
-- :event_id (UUID text).
UPDATE outbox SET state = 0, attempts = 0, available_at = 0, lease_owner = NULL,
                  lease_token = NULL, dead_at = NULL, replays = LEAST(replays, 2147483646) + 1,
                  replayed_at = CAST(UNIX_TIMESTAMP(CURRENT_TIMESTAMP(6)) * 1000000 AS SIGNED)
WHERE event_id = :event_id AND state = 2
