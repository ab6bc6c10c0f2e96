-- The writer transaction's commit of one event in one round trip (0005_writer_commit_mark.sql):
-- the call's mark (the event's id), then append.sql's placeholders.
CALL outbox_commit_one(:mark, :event_id, :aggregate_type, :aggregate_id, :event_type,
                       _binary :payload, :headers, :created_at, :content_type, :available_at)
