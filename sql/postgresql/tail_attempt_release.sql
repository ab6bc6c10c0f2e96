-- The log-tailing relay's first batch after its stream opened was no attempt: released unsent
-- (the relay is stopping), or settled while its first transaction goes on past it (the slot
-- stays at that position). $1 slot name, $2 position (LSN as bigint), $3 the batch's first
-- event's index in that transaction.
UPDATE outbox_tail_attempts SET claims = greatest(claims - 1, 0)
WHERE slot = $1 AND position = $2::bigint AND within = $3::bigint
