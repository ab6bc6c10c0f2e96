-- The migration runner, first statement of its transaction: one migration at a time, across
-- processes (an advisory lock held until the transaction ends).
SELECT pg_advisory_xact_lock(7231350017261240901)
