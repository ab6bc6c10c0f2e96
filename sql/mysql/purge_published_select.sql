-- The purge's first step, a plain read: at most :limit published rows (state 1) published
-- before :before (Unix us), oldest first; purge_published.sql then deletes them by primary key.
SELECT seq FROM outbox FORCE INDEX (outbox_claim)
WHERE state = 1 AND published_at < :before ORDER BY seq LIMIT :limit
