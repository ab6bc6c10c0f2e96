-- Which of the aggregates given have pending rows in the outbox table: the log-tailing relay
-- parks their later events from the WAL behind them, so an aggregate's order holds. It asks
-- before each stream batch (prepared once per connection), so each aggregate given is one
-- probe of outbox_pending_by_aggregate, whatever the backlog: the pending rows scanned and
-- matched instead took 30 ms per batch with 100,000 retries waiting. Every aggregate with a
-- pending row: parked_aggregates_all.sql.
-- $1 aggregate types, $2 aggregate ids (text arrays, index-aligned).
SELECT a.t, a.i
FROM (SELECT DISTINCT u.t, u.i FROM unnest($1::text[], $2::text[]) AS u(t, i)) AS a
WHERE EXISTS (SELECT 1 FROM outbox o
              WHERE o.state = 0 AND o.aggregate_type = a.t AND o.aggregate_id = a.i)
