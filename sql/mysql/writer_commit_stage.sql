-- After a failed CALL outbox_commit: 'insert' (or NULL: the procedure did not start) when the
-- INSERT failed and COMMIT did not run; 'commit' when COMMIT failed.
SELECT @outbox_commit_stage
