-- A delivery the consumer gave up on, kept whatever it is (payload as a BLOB).
-- ?1 consumer, ?2 event_id, ?3 aggregate_type, ?4 aggregate_id, ?5 event_type, ?6 payload,
-- ?7 headers, ?8 error, ?9 failed_at (Unix ms), ?10 content_type.
INSERT OR REPLACE INTO outbox_inbox_dead (consumer, event_id, aggregate_type, aggregate_id,
                                          event_type, payload, headers, error, failed_at,
                                          content_type)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
