-- The leasing claim, in its short claim transaction after claim.sql locked the rows: stamps
-- lease expiry, owner, fencing token and one more attempt, by primary key in seq order.
-- :until lease expiry (Unix us), :owner, :token, :seqs (a JSON array of integers, sorted).
UPDATE JSON_TABLE(:seqs, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS c
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = c.seq
SET o.available_at = :until, o.lease_owner = :owner, o.lease_token = :token,
    o.attempts = LEAST(o.attempts, 2147483646) + 1
WHERE o.state = 0
