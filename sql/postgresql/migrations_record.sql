-- The migration runner: records one applied file.
-- $1 version, $2 name.
INSERT INTO outbox_schema_migrations (version, name) VALUES ($1, $2)
