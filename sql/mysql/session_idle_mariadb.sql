-- The store's own sessions on MariaDB: a transaction idle this long ends the connection, so a
-- stalled relay's locking claim is cut off and its rows are claimable again (keep it above the
-- relay's publish timeout).
-- :idle (s).
SET SESSION idle_transaction_timeout = :idle
