-- The leasing claim, one autocommit statement: the candidates of the locking claim
-- (claim_locking.sql explains the filters), kept only if every earlier pending row of their
-- aggregate is a candidate too (checked link by link, as there), are stamped with lease expiry, owner, fencing token and one
-- more attempt, and returned (in no particular order: the store sorts by seq). The rows are
-- updated by primary key (= ANY of an array): joined to `ok` instead, a skewed table's
-- estimates made the planner hash the whole outbox for each claim.
-- With a scan limit $6 (claim_request::scan_limit: the relay's claims made ahead) only the $6
-- oldest claimable rows are looked at: the bound is the seq of the $6-th (an InitPlan; the
-- server may run it when $6 is 0 as well, hence the greatest), and the walk of `c` stops there
-- instead of crossing a hot aggregate's backlog held back behind the batch in flight.
-- $1 lease expiry (Unix us), $2 owner, $3 fencing token, $4 now (Unix us), $5 limit,
-- $6 scan limit (0: none).
-- Columns: the message columns of outbox::sql::column.
WITH c AS (
  SELECT o.seq, o.aggregate_type, o.aggregate_id
  FROM outbox o
  WHERE o.state = 0 AND o.available_at <= outbox_ts($4::bigint)
    AND o.seq <= CASE WHEN $6::bigint > 0 THEN
                   coalesce((SELECT b.seq FROM outbox b
                             WHERE b.state = 0 AND b.available_at <= outbox_ts($4::bigint)
                             ORDER BY b.seq OFFSET greatest($6::bigint - 1, 0) LIMIT 1),
                            9223372036854775807)
                 ELSE 9223372036854775807 END
    AND (NOT EXISTS (SELECT 1 FROM outbox w0
                     WHERE w0.state = 0 AND w0.available_at > '-infinity'
                       AND w0.available_at > outbox_ts($4::bigint))
         OR (SELECT 1 FROM outbox w
             WHERE w.state = 0 AND w.available_at > '-infinity'
               AND w.aggregate_type = o.aggregate_type AND w.aggregate_id = o.aggregate_id
               AND w.seq < o.seq AND w.available_at > outbox_ts($4::bigint) LIMIT 1) IS NULL)
  ORDER BY o.seq LIMIT $5 FOR UPDATE SKIP LOCKED),
l AS (
  SELECT c.seq, c.aggregate_type, c.aggregate_id,
         lag(c.seq) OVER (PARTITION BY c.aggregate_type, c.aggregate_id ORDER BY c.seq) AS prev
  FROM c),
k AS (
  SELECT l.seq, l.aggregate_type, l.aggregate_id,
         (SELECT p.seq FROM outbox p
          WHERE p.state = 0 AND p.aggregate_type = l.aggregate_type
            AND p.aggregate_id = l.aggregate_id AND p.seq < l.seq
          ORDER BY p.seq DESC LIMIT 1)
           IS NOT DISTINCT FROM l.prev AS linked
  FROM l),
ok AS (
  SELECT z.seq FROM (
    SELECT k.seq, bool_and(k.linked) OVER (PARTITION BY k.aggregate_type, k.aggregate_id
                                           ORDER BY k.seq ROWS UNBOUNDED PRECEDING) AS passed
    FROM k) z
  WHERE z.passed)
UPDATE outbox o SET available_at = outbox_ts($1::bigint), lease_owner = $2, lease_token = $3,
                    attempts = least(o.attempts, 2147483646) + 1
WHERE o.seq = ANY (ARRAY(SELECT ok.seq FROM ok))
RETURNING o.seq, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload_bytes,
          o.headers::text, o.attempts, outbox_us(o.created_at), o.content_type
