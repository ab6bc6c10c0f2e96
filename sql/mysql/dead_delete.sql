-- Discard, its last step: removes the dead letters dead_archive.sql copied.
-- :seqs (a JSON array of integers, sorted).
DELETE o FROM JSON_TABLE(:seqs, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS c
STRAIGHT_JOIN outbox o FORCE INDEX (PRIMARY) ON o.seq = c.seq
WHERE o.state = 2
