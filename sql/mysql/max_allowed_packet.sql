-- The session's max_allowed_packet: the largest statement the server takes (past it the server
-- drops the connection, and the transaction with it). Fixed when the session connects. Read by
-- the writer before it sends an append of more than 1 MiB.
SELECT @@SESSION.max_allowed_packet
