-- The migration runner: the versions applied so far, ascending (none before 0001 ran).
SELECT version FROM outbox_schema_migrations ORDER BY version
