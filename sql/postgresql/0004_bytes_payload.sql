-- Payloads are bytes with a content type (issue 10). jsonb rewrote the writer's text (key
-- order, spaces), so a consumer got other bytes from PostgreSQL than from SQLite; bytea keeps
-- them exactly, whatever the content type. Rows written before keep the text jsonb had made of
-- them (the original bytes are gone).
-- The column is renamed as well: a relay of an earlier release still running would otherwise
-- go on selecting `payload::text`, which on bytea is the hex form ("\x7b7d"), and publish that
-- as the payload without an error. Renamed, its statements fail (42703) and publish nothing.
-- ALTER ... TYPE rewrites the table under an exclusive lock: on a large outbox, drain or purge
-- it first.
ALTER TABLE outbox
  ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8'),
  ADD COLUMN content_type text NOT NULL DEFAULT 'application/json';
ALTER TABLE outbox RENAME COLUMN payload TO payload_bytes;
ALTER TABLE outbox_inbox_dead
  ADD COLUMN content_type text NOT NULL DEFAULT 'application/json';
