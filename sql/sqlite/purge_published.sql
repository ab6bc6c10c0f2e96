-- Deletes at most ?2 published rows (state 1) published before ?1 (Unix ms), oldest first.
DELETE FROM outbox WHERE seq IN (
  SELECT seq FROM outbox INDEXED BY outbox_by_state
  WHERE state = 1 AND published_at < ?1 ORDER BY seq LIMIT ?2)
