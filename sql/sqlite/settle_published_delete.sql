-- Settle, retention delete_on_publish: the published rows still held under the claim's token
-- are deleted.
-- ?1 the seqs (a JSON array), ?2 fencing token.
DELETE FROM outbox
WHERE seq IN (SELECT value FROM json_each(?1)) AND lease_token = ?2 AND state = 0
