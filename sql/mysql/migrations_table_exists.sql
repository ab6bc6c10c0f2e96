-- The migration runner: does the version table exist yet (in the session's database)?
SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'outbox_schema_migrations'
