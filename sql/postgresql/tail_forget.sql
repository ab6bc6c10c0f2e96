-- A dropped (or newly made) log-tailing slot's count of head-batch claims and settled position
-- go with it. $1 slot name.
WITH attempts AS (DELETE FROM outbox_tail_attempts WHERE slot = $1)
DELETE FROM outbox_tail_positions WHERE slot = $1
