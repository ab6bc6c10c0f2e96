-- The log-tailing relay's settled position for its slot (0 when it has none yet). $1 slot name.
SELECT coalesce((SELECT settled FROM outbox_tail_positions WHERE slot = $1), 0)
