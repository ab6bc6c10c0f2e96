-- Payloads are bytes with a content type (issue 10). The payload column keeps its TEXT
-- declaration: the store binds every payload as a BLOB, which TEXT affinity stores unchanged,
-- so any bytes (Avro, Protobuf) round-trip exactly; rows written before hold their text.
ALTER TABLE outbox ADD COLUMN content_type TEXT NOT NULL DEFAULT 'application/json';
ALTER TABLE outbox_inbox_dead ADD COLUMN content_type TEXT NOT NULL DEFAULT 'application/json';
