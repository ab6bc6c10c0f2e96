-- The writer transaction's commit in one round trip (0005_writer_commit_mark.sql): the call's
-- mark (its first event's id) and the events as one JSON array (appender::commit).
CALL outbox_commit(:mark, :events)
