-- The writer transaction's commit in one round trip (0004_writer_commit.sql): the events as one
-- JSON array (appender::commit).
CALL outbox_commit(:events)
