-- Deletes at most ?2 archived dead letters archived before ?1 (Unix ms), oldest first.
DELETE FROM outbox_archive WHERE rowid IN (
  SELECT rowid FROM outbox_archive INDEXED BY outbox_archive_by_time
  WHERE archived_at < ?1 ORDER BY archived_at, seq LIMIT ?2)
