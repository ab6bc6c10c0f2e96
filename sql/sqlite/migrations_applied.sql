-- The migration runner: the versions applied so far (the table exists once 0001 ran).
SELECT version FROM outbox_schema_migrations ORDER BY version
