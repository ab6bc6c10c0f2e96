-- The migration runner: one migration at a time, across processes (a named lock of the
-- session, waited for up to 60 s; 1 when taken).
SELECT GET_LOCK('outbox_migrate', 60)
