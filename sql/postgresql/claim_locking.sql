-- The locking claim, inside the claim transaction (BEGIN; SET LOCAL
-- idle_in_transaction_session_timeout). `c` locks candidates, skipping rows other claims
-- locked; nothing is written (the row locks are the claim, and a rollback undoes nothing).
-- Pending is state 0 (outbox::sql::row_state).
--
-- Before its LIMIT, `c` leaves out rows behind an earlier row of their aggregate that waits for
-- a retry (available_at in the future): otherwise a long run of such rows fills every batch and
-- is filtered away below (migration 0003). That probe goes to the small partial index
-- outbox_waiting_by_aggregate, hence the literal `available_at > '-infinity'`; an uncorrelated
-- EXISTS, run once per claim (an InitPlan), skips it when no row waits at all.
-- The last column says whether the row passed the per-aggregate check: every earlier pending
-- row of its aggregate is a candidate too. It is checked link by link, so its cost does not
-- grow with an aggregate's backlog: a candidate is linked when the pending row just before it
-- in its aggregate is the candidate before it in `c` (none for both: the first); it passes when
-- it and every earlier candidate of its aggregate are linked (a running bool_and). The probe
-- is one index step whichever index the planner takes: outbox_pending_by_aggregate (many
-- aggregates; a first row of its aggregate finds nothing and reads no heap page), or
-- outbox_pending backwards from the candidate when the statistics say one aggregate fills the
-- table (its previous row is then the next entry). Asked as "an earlier pending row of the
-- aggregate that is not a candidate", it walked all the earlier candidates for each one: a
-- claim of 500 from one hot aggregate took seconds (10,000 events: 27 s, 370 events/s). The
-- rows that fail the check stay locked, unused, until the claim ends.
-- A claim after rows held back behind another relay's open batch runs again with $3 and $4/$5
-- (see the store's `claim`).
--
-- With a scan limit $6 (claim_request::scan_limit: the relay's claims made ahead, on its
-- second session) only the $6 oldest claimable rows are looked at, locked by another claim or
-- not: the bound is the seq of the $6-th (an InitPlan; the server may run it when $6 is 0 as
-- well, hence the greatest), so the passes after rows held back stop there instead of crossing
-- a hot aggregate's backlog.
-- $1 now (Unix us), $2 limit, $3 only rows after this seq (0 for all), $4/$5 aggregates
-- (types, ids: text arrays) to leave out ('{}' for none), $6 scan limit (0: none).
-- Columns: the message columns of outbox::sql::column (attempts counting this one), then
-- the per-aggregate flag.
WITH c AS (
  SELECT o.seq, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload_bytes,
         o.headers, o.attempts, o.created_at, o.content_type
  FROM outbox o
  WHERE o.state = 0 AND o.available_at <= outbox_ts($1::bigint)
    AND o.seq > $3::bigint
    AND o.seq <= CASE WHEN $6::bigint > 0 THEN
                   coalesce((SELECT b.seq FROM outbox b
                             WHERE b.state = 0 AND b.available_at <= outbox_ts($1::bigint)
                             ORDER BY b.seq OFFSET greatest($6::bigint - 1, 0) LIMIT 1),
                            9223372036854775807)
                 ELSE 9223372036854775807 END
    AND (o.aggregate_type, o.aggregate_id) NOT IN
        (SELECT x.t, x.i FROM unnest($4::text[], $5::text[]) AS x(t, i))
    AND (NOT EXISTS (SELECT 1 FROM outbox w0
                     WHERE w0.state = 0 AND w0.available_at > '-infinity'
                       AND w0.available_at > outbox_ts($1::bigint))
         OR (SELECT 1 FROM outbox w
             WHERE w.state = 0 AND w.available_at > '-infinity'
               AND w.aggregate_type = o.aggregate_type AND w.aggregate_id = o.aggregate_id
               AND w.seq < o.seq AND w.available_at > outbox_ts($1::bigint) LIMIT 1) IS NULL)
  ORDER BY o.seq LIMIT $2 FOR UPDATE SKIP LOCKED),
l AS (
  SELECT c.*, lag(c.seq) OVER (PARTITION BY c.aggregate_type, c.aggregate_id ORDER BY c.seq) AS prev
  FROM c),
k AS (
  SELECT l.*,
         (SELECT p.seq FROM outbox p
          WHERE p.state = 0 AND p.aggregate_type = l.aggregate_type
            AND p.aggregate_id = l.aggregate_id AND p.seq < l.seq
          ORDER BY p.seq DESC LIMIT 1)
           IS NOT DISTINCT FROM l.prev AS linked
  FROM l)
SELECT k.seq, k.event_id, k.aggregate_type, k.aggregate_id, k.event_type, k.payload_bytes,
       k.headers::text, least(k.attempts, 2147483646) + 1, outbox_us(k.created_at),
       k.content_type,
       bool_and(k.linked) OVER (PARTITION BY k.aggregate_type, k.aggregate_id ORDER BY k.seq
                                ROWS UNBOUNDED PRECEDING)
FROM k
