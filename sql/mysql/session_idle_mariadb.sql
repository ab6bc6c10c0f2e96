-- The store's own sessions on MariaDB: a transaction idle this long ends the connection, so a
-- stalled relay's locking claim is cut off and its rows are claimable again (keep it above the
-- relay's publish timeout). The read-only and write limits, when set (a server's global
-- default), would take precedence for their kind of transaction (a claim is read-only until
-- its settle): 0 leaves idle_transaction_timeout the one limit the relay checks against.
-- :idle (s).
SET SESSION idle_transaction_timeout = :idle, SESSION idle_readonly_transaction_timeout = 0,
    SESSION idle_write_transaction_timeout = 0
