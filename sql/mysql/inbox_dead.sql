-- A delivery the consumer gave up on, kept whatever it is: the payload as bytes, the texts
-- made storable by the store. A second dead letter of the same delivery replaces the first.
-- :consumer, :event_id, :aggregate_type, :aggregate_id, :event_type, :payload (bytes),
-- :headers (text), :error, :failed_at (Unix us), :content_type.
INSERT INTO outbox_inbox_dead (consumer, event_id, aggregate_type, aggregate_id, event_type,
                               payload, headers, error, failed_at, content_type)
VALUES (:consumer, :event_id, :aggregate_type, :aggregate_id, :event_type, _binary :payload,
        :headers, :error, :failed_at, :content_type)
ON DUPLICATE KEY UPDATE aggregate_type = VALUES(aggregate_type),
  aggregate_id = VALUES(aggregate_id), event_type = VALUES(event_type),
  payload = VALUES(payload), headers = VALUES(headers), error = VALUES(error),
  failed_at = VALUES(failed_at), content_type = VALUES(content_type)
