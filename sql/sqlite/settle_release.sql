-- Settle: rows not attempted go back to pending, their attempt given back: claimable at once
-- (?3 = 0), or deferred until ?3 (a release with settlement::retry_at set: a row waiting so
-- holds its aggregate's later rows back, as a retry does). A row keeps its last error; a
-- deferred one with none gets ?4 (the mark stats.sql tells it from a scheduled event by).
-- ?1 the seqs (a JSON array), ?2 fencing token, ?3 when claimable (Unix ms; 0: at once),
-- ?4 a deferral's error (NULL for a release at once).
UPDATE outbox SET available_at = ?3, attempts = attempts - 1, lease_owner = NULL,
                  lease_token = NULL, last_error = coalesce(last_error, ?4)
WHERE seq IN (SELECT value FROM json_each(?1)) AND lease_token = ?2 AND state = 0
