-- The consumer's inbox record, in the handler's transaction; a duplicate changes no row (and
-- does not abort the transaction).
-- ?1 consumer, ?2 event_id, ?3 processed_at (Unix ms).
INSERT INTO outbox_inbox (consumer, event_id, processed_at) VALUES (?1, ?2, ?3)
ON CONFLICT DO NOTHING
