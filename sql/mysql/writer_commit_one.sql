-- The writer transaction's commit of one event in one round trip (0004_writer_commit.sql);
-- the placeholders are append.sql's.
CALL outbox_commit_one(:event_id, :aggregate_type, :aggregate_id, :event_type, _binary :payload,
                       :headers, :created_at, :content_type, :available_at)
