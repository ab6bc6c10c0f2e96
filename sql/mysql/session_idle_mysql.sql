-- A locking store's session on MySQL 8, which has no idle-transaction limit: wait_timeout ends
-- a connection idle this long in or out of a transaction (the store reconnects by itself; keep
-- it above the relay's publish timeout and idle poll).
-- :idle (s).
SET SESSION wait_timeout = :idle
