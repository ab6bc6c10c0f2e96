-- Deletes at most ?2 inbox records processed before ?1 (Unix ms), oldest first.
DELETE FROM outbox_inbox WHERE rowid IN (
  SELECT rowid FROM outbox_inbox WHERE processed_at < ?1 ORDER BY processed_at LIMIT ?2)
