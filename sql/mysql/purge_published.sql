-- Deletes the rows purge_published_select.sql chose, by primary key in seq order (a DELETE
-- that walked the secondary index would lock it before the primary key, the opposite order
-- of a settle, and a large IN list deadlocks against claims); rows changed since are kept.
-- :seqs (a JSON array of integers, sorted), :before (Unix us).
DELETE o FROM JSON_TABLE(:seqs, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS c
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = c.seq
WHERE o.state = 1 AND o.published_at < :before
