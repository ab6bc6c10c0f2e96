-- Every aggregate that has pending rows in the outbox table: the log-tailing relay reads them
-- as its stream opens, and parks their later events from the WAL behind them
-- (parked_aggregates.sql asks for given aggregates, before each stream batch).
SELECT DISTINCT o.aggregate_type, o.aggregate_id FROM outbox o WHERE o.state = 0
