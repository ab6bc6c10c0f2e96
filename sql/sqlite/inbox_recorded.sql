-- Whether a consumer recorded an event (applied or dead-lettered it): a row when it did. The
-- consumer asks before applying a delivery stamped with its predecessor.
-- ?1 consumer, ?2 event_id.
SELECT 1 FROM outbox_inbox WHERE consumer = ?1 AND event_id = ?2
