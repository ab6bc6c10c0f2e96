-- A store checks, on each new connection, that the database is at the schema version its
-- statements need (outbox_schema_migrations exists once 0001 ran).
SELECT COALESCE(MAX(version), 0) FROM outbox_schema_migrations
