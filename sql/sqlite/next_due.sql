-- When the next waiting row falls due (concepts::due_telling_store): the earliest available_at
-- after now of a pending row held by no claim (a scheduled event, a retry), Unix ms, 0 when
-- none. Through the small partial index of 0004_waiting_rows.sql, whose predicate it repeats.
-- ?1 now (Unix ms).
SELECT coalesce(min(available_at), 0) FROM outbox INDEXED BY outbox_waiting_by_aggregate
WHERE state = 0 AND available_at > 0 AND lease_token IS NULL AND available_at > ?1
