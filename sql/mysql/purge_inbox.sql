-- Deletes at most :limit inbox records processed before :before (Unix us), oldest first. The
-- dedup window is far older than any delivery in progress, so the records it deletes are not
-- the ones a consumer's duplicate check holds (a duplicate INSERT keeps a shared lock on the
-- existing record until its transaction ends).
DELETE FROM outbox_inbox WHERE processed_at < :before ORDER BY processed_at LIMIT :limit
