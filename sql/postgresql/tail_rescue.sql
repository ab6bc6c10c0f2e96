-- Table mode's rows that the log-tailing relay's stream passed without showing them
-- (tail_sweep.sql, once the relay's settled position reached the position read with them)
-- become pending rows of the table, claimable now (a scheduled one at its available_at, which
-- it keeps), with their seq (their insert order) and no attempt counted: the table's claim
-- publishes them like a requeued dead letter. A row the
-- stream showed is in state 3 no more by then (deleted once published, or parked).
-- $1 their seqs (bigint[] text). Returns the aggregates of the rows moved.
UPDATE outbox SET state = 0
WHERE seq = ANY($1::bigint[]) AND state = 3
RETURNING aggregate_type, aggregate_id
