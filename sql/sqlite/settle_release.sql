-- Settle: rows not attempted go back to pending, their attempt given back: claimable at once
-- (?3 = 0), or deferred until ?3 (a release with settlement::retry_at set: a row waiting so
-- holds its aggregate's later rows back, as a retry does).
-- ?1 the seqs (a JSON array), ?2 fencing token, ?3 when claimable (Unix ms; 0: at once).
UPDATE outbox SET available_at = ?3, attempts = attempts - 1, lease_owner = NULL,
                  lease_token = NULL
WHERE seq IN (SELECT value FROM json_each(?1)) AND lease_token = ?2 AND state = 0
