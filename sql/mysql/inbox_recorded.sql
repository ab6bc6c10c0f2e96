-- Whether a consumer recorded an event (applied or dead-lettered it): a row when it did. The
-- consumer asks before applying a delivery stamped with its predecessor. A plain read (no
-- lock): the predecessor's record, once committed, stays.
-- :consumer, :event_id (UUID text).
SELECT 1 FROM outbox_inbox WHERE consumer = :consumer AND event_id = :event_id
