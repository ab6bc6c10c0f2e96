-- The store's own sessions (relay, consumer) run at READ COMMITTED: under REPEATABLE READ the
-- claim's locking read takes gap locks that block the application's INSERTs into the outbox.
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED
