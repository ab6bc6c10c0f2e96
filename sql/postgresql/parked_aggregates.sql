-- The aggregates (of those given) that have pending rows in the outbox table: the log-tailing
-- relay parks their later events from the WAL behind them, so an aggregate's order holds.
-- $1 aggregate types, $2 aggregate ids (text arrays, index-aligned); both NULL: every
-- aggregate with a pending row.
SELECT DISTINCT o.aggregate_type, o.aggregate_id
FROM outbox o
WHERE o.state = 0
  AND ($1::text[] IS NULL
       OR (o.aggregate_type, o.aggregate_id) IN (SELECT * FROM unnest($1::text[], $2::text[])))
