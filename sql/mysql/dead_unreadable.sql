-- The claim dead-letters the rows it cannot read (written by another program), with the
-- reason, in the claim's transaction (their attempt counted here: the claim wrote none).
-- :now (Unix us), :rows a JSON array of {"s": seq, "e": reason, "c": cause key}, sorted by seq.
UPDATE JSON_TABLE(:rows, '$[*]' COLUMNS (seq BIGINT PATH '$.s', err LONGTEXT PATH '$.e',
                                         cause VARCHAR(255) PATH '$.c')) AS u
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = u.seq
SET o.state = 2, o.dead_at = :now, o.last_error = u.err, o.dead_cause = u.cause,
    o.attempts = LEAST(o.attempts, 2147483646) + 1, o.lease_owner = NULL, o.lease_token = NULL
WHERE o.state = 0
