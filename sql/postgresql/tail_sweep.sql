-- The log-tailing relay's look for table mode's rows that its stream passed without showing
-- them (written while the publication did not carry the outbox table, or before the slot was
-- made). One statement, so one snapshot: the server's WAL insert position, and the oldest
-- committed streamed rows (state 3), at most $1. Each of those rows committed before that
-- position (a transaction becomes visible only after its commit record went into the WAL), so
-- once the relay's settled position has reached it, the stream has shown every one of them it
-- will ever show, and settled those (deleted, or parked: no longer state 3). One row: the
-- position (LSN as bigint), the WAL page size, how many rows, their seqs (bigint[] text).
SELECT (pg_catalog.pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint,
       pg_catalog.current_setting('wal_block_size')::bigint,
       count(*),
       coalesce(array_agg(s.seq ORDER BY s.seq)::text, '{}')
FROM (SELECT seq FROM outbox WHERE state = 3 ORDER BY seq LIMIT $1::bigint) AS s
