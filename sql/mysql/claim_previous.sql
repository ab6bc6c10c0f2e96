-- The per-aggregate check of a claim, a plain (non-locking) read: for each candidate, the seq
-- of the pending row before it in its aggregate (0 when none). The store takes a candidate
-- only if that row is 0 or taken by the same claim, so a later event never overtakes one that
-- is in flight under another relay, locked, or waiting for a retry. One index dive per row.
-- :seqs the candidates' seqs (a JSON array of integers).
SELECT c.seq,
       COALESCE((SELECT p.seq FROM outbox p FORCE INDEX (outbox_by_aggregate)
                 WHERE p.state = 0 AND p.aggregate_type = o.aggregate_type
                   AND p.aggregate_id = o.aggregate_id AND p.seq < o.seq
                 ORDER BY p.seq DESC LIMIT 1), 0)
FROM JSON_TABLE(:seqs, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS c
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = c.seq
