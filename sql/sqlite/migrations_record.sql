-- The migration runner: records one applied file.
-- ?1 version, ?2 name, ?3 applied_at (Unix ms).
INSERT INTO outbox_schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)
