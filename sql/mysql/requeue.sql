-- A dead letter (state 2) becomes pending again, attempts reset.
-- :event_id (UUID text).
UPDATE outbox SET state = 0, attempts = 0, available_at = 0, lease_owner = NULL,
                  lease_token = NULL, dead_at = NULL
WHERE event_id = :event_id AND state = 2
