-- The migration runner: does the version table exist yet (in the session's search_path)?
SELECT to_regclass('outbox_schema_migrations') IS NOT NULL
