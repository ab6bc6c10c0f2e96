-- The migration runner: does the version table exist yet?
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'outbox_schema_migrations'
