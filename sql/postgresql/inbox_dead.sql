-- A delivery the consumer gave up on, kept whatever it is: the payload as bytes (exact, NUL
-- bytes included), the texts made storable by the store. A second dead letter of the same
-- delivery replaces the first (as on every store).
-- $1 consumer, $2 event_id, $3 aggregate_type, $4 aggregate_id, $5 event_type, $6 payload
-- (bytea, sent in binary), $7 headers (text), $8 error, $9 failed_at (Unix us),
-- $10 content_type.
INSERT INTO outbox_inbox_dead (consumer, event_id, aggregate_type, aggregate_id, event_type,
                               payload, headers, error, failed_at, content_type)
VALUES ($1, $2::uuid, $3, $4, $5, $6::bytea, $7, $8, outbox_ts($9::bigint), $10)
ON CONFLICT (consumer, event_id) DO UPDATE
  SET aggregate_type = EXCLUDED.aggregate_type, aggregate_id = EXCLUDED.aggregate_id,
      event_type = EXCLUDED.event_type, payload = EXCLUDED.payload, headers = EXCLUDED.headers,
      error = EXCLUDED.error, failed_at = EXCLUDED.failed_at,
      content_type = EXCLUDED.content_type
