-- Settle: rows not attempted wait until a time (a release with settlement::retry_at set):
-- pending, their attempts as before the claim, their last error kept (a row with none gets the
-- deferral's, the mark stats.sql tells it from a scheduled event by), by primary key. A row
-- waiting so holds its aggregate's later rows back, as a retry does. Under leasing the claim's
-- attempt is given back; under locking the claim wrote none.
-- :locking and :locking2 (1: locking), :fates a JSON array of {"s": seq, "a": when claimable
-- (Unix us), "e": error}, sorted by seq, :token.
UPDATE JSON_TABLE(:fates, '$[*]' COLUMNS (seq BIGINT PATH '$.s', at BIGINT PATH '$.a',
                                          err LONGTEXT PATH '$.e')) AS f
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = f.seq
SET o.available_at = f.at,
    o.attempts = IF(:locking = 1, o.attempts, GREATEST(o.attempts, 1) - 1),
    o.last_error = COALESCE(o.last_error, f.err),
    o.lease_owner = NULL, o.lease_token = NULL
WHERE o.state = 0 AND (:locking2 = 1 OR o.lease_token = :token)
