-- Settle, retention delete_on_publish: published rows are deleted, by primary key.
-- :seqs (a JSON array of integers, sorted), :locking, :token (see settle_published_keep.sql).
DELETE o FROM JSON_TABLE(:seqs, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS c
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = c.seq
WHERE o.state = 0 AND (:locking = 1 OR o.lease_token = :token)
