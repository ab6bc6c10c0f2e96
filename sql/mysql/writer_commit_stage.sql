-- After a failed CALL outbox_commit (0005_writer_commit_mark.sql): how far the procedure got,
-- '<mark>:insert', '<mark>:commit' or '<mark>:done' for the call of that mark; anything else
-- when it did not start.
SELECT @outbox_commit_stage
