-- A dead letter (state 2) becomes pending again, attempts reset.
-- $1 event_id (UUID text).
UPDATE outbox SET state = 0, attempts = 0, available_at = '-infinity', lease_owner = NULL,
                  lease_token = NULL, dead_at = NULL
WHERE event_id = $1::uuid AND state = 2
