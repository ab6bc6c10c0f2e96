-- The store's own sessions: how long a statement waits for a row lock before it fails with
-- 1205 (transient, retried).
-- :lock_wait (s).
SET SESSION innodb_lock_wait_timeout = :lock_wait
