-- The log-tailing relay released its first batch unsent (it is stopping): that claim was not
-- an attempt. $1 slot name, $2 position (LSN as bigint).
UPDATE outbox_tail_attempts SET claims = greatest(claims - 1, 0)
WHERE slot = $1 AND position = $2::bigint
