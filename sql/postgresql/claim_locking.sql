-- The locking claim, inside the claim transaction (BEGIN; SET LOCAL
-- idle_in_transaction_session_timeout). `c` locks candidates, skipping rows other claims
-- locked; nothing is written (the row locks are the claim, and a rollback undoes nothing).
-- Pending is state 0 (outbox::store::row_state).
--
-- Before its LIMIT, `c` leaves out rows behind an earlier row of their aggregate that waits for
-- a retry (available_at in the future): otherwise a long run of such rows fills every batch and
-- is filtered away below (migration 0003). That probe goes to the small partial index
-- outbox_waiting_by_aggregate, hence the literal `available_at > '-infinity'`; an uncorrelated
-- EXISTS, run once per claim (an InitPlan), skips it when no row waits at all.
-- The last column says whether the row passed the per-aggregate check: every earlier pending
-- row of its aggregate is a candidate too. That test is a scalar subquery on purpose: as NOT
-- EXISTS the planner made it a hash anti-join over the whole outbox (55 ms per claim of 500 on
-- 100,000 rows); as a scalar subquery it stays one index probe per candidate. The rows that
-- fail it stay locked, unused, until the claim ends.
-- A claim after rows held back behind another relay's open batch runs again with $3 and $4/$5
-- (see the store's `claim`).
--
-- $1 now (Unix us), $2 limit, $3 only rows after this seq (0 for all), $4/$5 aggregates
-- (types, ids: text arrays) to leave out ('{}' for none).
-- Columns: the message columns of outbox::store::column (attempts counting this one), then
-- the per-aggregate flag.
WITH c AS (
  SELECT o.seq, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload_bytes,
         o.headers, o.attempts, o.created_at, o.content_type
  FROM outbox o
  WHERE o.state = 0 AND o.available_at <= outbox_ts($1::bigint)
    AND o.seq > $3::bigint
    AND (o.aggregate_type, o.aggregate_id) NOT IN
        (SELECT x.t, x.i FROM unnest($4::text[], $5::text[]) AS x(t, i))
    AND (NOT EXISTS (SELECT 1 FROM outbox w0
                     WHERE w0.state = 0 AND w0.available_at > '-infinity'
                       AND w0.available_at > outbox_ts($1::bigint))
         OR (SELECT 1 FROM outbox w
             WHERE w.state = 0 AND w.available_at > '-infinity'
               AND w.aggregate_type = o.aggregate_type AND w.aggregate_id = o.aggregate_id
               AND w.seq < o.seq AND w.available_at > outbox_ts($1::bigint) LIMIT 1) IS NULL)
  ORDER BY o.seq LIMIT $2 FOR UPDATE SKIP LOCKED)
SELECT c.seq, c.event_id, c.aggregate_type, c.aggregate_id, c.event_type, c.payload_bytes,
       c.headers::text, least(c.attempts, 2147483646) + 1, outbox_us(c.created_at),
       c.content_type,
       (SELECT p.seq FROM outbox p
        WHERE p.state = 0 AND p.aggregate_type = c.aggregate_type
          AND p.aggregate_id = c.aggregate_id AND p.seq < c.seq
          AND NOT EXISTS (SELECT 1 FROM c c2 WHERE c2.seq = p.seq) LIMIT 1) IS NULL
FROM c
