-- The log-tailing relay's first batch after its stream opened was no attempt: released unsent
-- (the relay is stopping), or settled while its first transaction goes on past it (the slot
-- stays at that position, and a relay that dies later in the transaction must not charge the
-- next claim there to this batch). $1 slot name, $2 position (LSN as bigint).
UPDATE outbox_tail_attempts SET claims = greatest(claims - 1, 0)
WHERE slot = $1 AND position = $2::bigint
