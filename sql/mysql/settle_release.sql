-- Settle (leasing): rows not attempted go back to pending, claimable at once, their attempt
-- given back. (Under locking a release is the claim transaction's rollback.)
-- :seqs (a JSON array of integers, sorted), :token.
UPDATE JSON_TABLE(:seqs, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS c
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = c.seq
SET o.available_at = 0, o.attempts = GREATEST(o.attempts, 1) - 1, o.lease_owner = NULL,
    o.lease_token = NULL
WHERE o.state = 0 AND o.lease_token = :token
