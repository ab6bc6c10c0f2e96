-- The migration runner: records one applied file.
-- :version, :name.
INSERT INTO outbox_schema_migrations (version, name) VALUES (:version, :name)
