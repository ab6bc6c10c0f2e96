-- The consumer's inbox record, in the handler's transaction. A duplicate fails with 1062 and
-- only this statement is rolled back (the transaction goes on): the store reports it as
-- `false`. Not INSERT IGNORE, which would also turn truncation and other errors into warnings.
-- :consumer, :event_id (UUID text), :processed_at (Unix us).
INSERT INTO outbox_inbox (consumer, event_id, processed_at)
VALUES (:consumer, :event_id, :processed_at)
