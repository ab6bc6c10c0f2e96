-- The aggregates (of those given) that have pending rows in the outbox table: the log-tailing
-- relay parks their later events from the WAL behind them, so an aggregate's order holds.
-- $1 aggregate types, $2 aggregate ids (text arrays, index-aligned); both NULL: every
-- aggregate with a pending row. The relay asks before each stream batch, so the aggregates
-- given are probed one by one (outbox_pending_by_aggregate), never the pending rows scanned:
-- a backlog of retries (100,000 rows) made the scan take 30 ms per batch.
SELECT a.t, a.i
FROM (SELECT DISTINCT u.t, u.i FROM unnest($1::text[], $2::text[]) AS u(t, i)) AS a
WHERE EXISTS (SELECT 1 FROM outbox o
              WHERE o.state = 0 AND o.aggregate_type = a.t AND o.aggregate_id = a.i)
UNION ALL
SELECT DISTINCT o.aggregate_type, o.aggregate_id
FROM outbox o
WHERE $1::text[] IS NULL AND o.state = 0
