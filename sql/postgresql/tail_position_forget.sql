-- A dropped (or newly made) log-tailing slot's saved position goes with it. $1 slot name.
DELETE FROM outbox_tail_positions WHERE slot = $1
