-- Settle: failed rows wait for their retry time (pending) or become dead letters (state 2),
-- with their error, by primary key. Under locking the attempt is counted here (the claim wrote
-- none); under leasing the claim counted it.
-- :dead and :dead2 (1: dead letters, 0: retries), :locking, :now (Unix us), :fates a JSON array of
-- {"s": seq, "a": retry time (Unix us), "e": error, "c": cause key}, sorted by seq, :token.
UPDATE JSON_TABLE(:fates, '$[*]' COLUMNS (seq BIGINT PATH '$.s', at BIGINT PATH '$.a',
                                          err LONGTEXT PATH '$.e',
                                          cause VARCHAR(255) PATH '$.c')) AS f
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = f.seq
SET o.state = IF(:dead = 1, 2, 0),
    o.available_at = IF(:dead = 1, o.available_at, f.at),
    o.attempts = IF(:locking = 1, LEAST(o.attempts, 2147483646) + 1, o.attempts),
    o.dead_at = IF(:dead = 1, :now, o.dead_at),
    o.dead_cause = IF(:dead2 = 1, f.cause, o.dead_cause),
    o.last_error = f.err, o.lease_owner = NULL, o.lease_token = NULL
WHERE o.state = 0 AND (:locking = 1 OR o.lease_token = :token)
