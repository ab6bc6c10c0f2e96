-- Whether the log-tailing relay's publication exists ($1 its name). The relay reads table
-- mode's rows as the outbox table's INSERTs through it (the table-free writer's logical decoding
-- messages go through any publication); the store creates it with CREATE PUBLICATION ... FOR
-- TABLE outbox when missing, then checks it (tail_publication_check.sql).
SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)
