-- Settle: rows not attempted go back to pending, claimable at once, their attempt given back.
-- ?1 the seqs (a JSON array), ?2 fencing token.
UPDATE outbox SET available_at = 0, attempts = attempts - 1, lease_owner = NULL,
                  lease_token = NULL
WHERE seq IN (SELECT value FROM json_each(?1)) AND lease_token = ?2 AND state = 0
