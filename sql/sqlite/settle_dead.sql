-- Settle (and the claim, for a row it cannot read): a row is dead-lettered (state 2) with its
-- reason.
-- ?1 now (Unix ms), ?2 error, ?3 seq, ?4 fencing token, ?5 cause key (outbox::cause_key).
UPDATE outbox SET state = 2, dead_at = ?1, last_error = ?2, dead_cause = ?5, lease_owner = NULL,
                  lease_token = NULL
WHERE seq = ?3 AND lease_token = ?4 AND state = 0
