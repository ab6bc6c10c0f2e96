-- The writer's transaction wakes the relay itself (0009): sent in the pipeline before its
-- INSERTs, so the wake-up trigger skips them, and every pending row is older than its rows.
-- Once per transaction; the NOTIFY (only when no relay is busy) is delivered at COMMIT.
SELECT set_config('outbox.writer_wakes', 'on', true), outbox_wake_if_idle(NULL)
