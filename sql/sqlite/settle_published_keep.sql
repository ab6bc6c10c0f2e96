-- Settle, retention keep: the published rows still held under the claim's token become
-- published (state 1).
-- ?1 the seqs (a JSON array), ?2 fencing token, ?3 now (Unix ms).
UPDATE outbox SET state = 1, published_at = ?3, lease_owner = NULL, lease_token = NULL
WHERE seq IN (SELECT value FROM json_each(?1)) AND lease_token = ?2 AND state = 0
