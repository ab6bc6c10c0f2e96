-- A dropped (or newly made) log-tailing slot's count of head-batch claims goes with it.
-- $1 slot name.
DELETE FROM outbox_tail_attempts WHERE slot = $1
