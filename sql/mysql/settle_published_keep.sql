-- Settle, retention keep: published rows become published (state 1), by primary key: the
-- list drives the join (STRAIGHT_JOIN) and each row is one primary-key lookup (FORCE INDEX).
-- Written as `WHERE seq IN (SELECT ... JSON_TABLE)`, the optimizer walked outbox_claim instead
-- and locked rows other relays hold: two settles deadlocked (1213) on each other's claims; and
-- on a small table it scans the whole table (locking every row) unless the index is forced.
-- Locking (:locking 1) runs in the claim transaction (the row locks are the fence); leasing
-- touches only rows still held under the claim's token.
-- :now (Unix us), :seqs (a JSON array of integers, sorted), :locking, :token.
UPDATE JSON_TABLE(:seqs, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS c
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = c.seq
SET o.state = 1, o.published_at = :now, o.lease_owner = NULL, o.lease_token = NULL
WHERE o.state = 0 AND (:locking = 1 OR o.lease_token = :token)
