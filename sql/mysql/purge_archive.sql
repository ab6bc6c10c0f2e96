-- Deletes at most :limit archived dead letters archived before :before (Unix us), oldest first.
DELETE FROM outbox_archive WHERE archived_at < :before ORDER BY archived_at, seq LIMIT :limit
