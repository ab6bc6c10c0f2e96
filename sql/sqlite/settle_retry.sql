-- Settle: a failed row waits for its retry time (its attempt was counted by the claim).
-- ?1 retry time (Unix ms), ?2 error, ?3 seq, ?4 fencing token.
UPDATE outbox SET available_at = ?1, last_error = ?2, lease_owner = NULL, lease_token = NULL
WHERE seq = ?3 AND lease_token = ?4 AND state = 0
