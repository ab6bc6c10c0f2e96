-- Backlog per aggregate type, in byte order: the type, then the columns of stats.sql
-- (outbox::sql::stats_column) over that type's rows. Grouped on the type's bytes: utf8mb4_bin
-- is a PAD SPACE collation, under which 'order' and 'order ' would make one group (two
-- aggregate types on every other store). Only pending (0) and dead (2) rows are read, a range
-- of outbox_claim, so published rows kept under retention keep cost nothing; the groups are
-- then sorted (a few rows, one per type).
-- :now ... :now5 (Unix us, five times).
SELECT CAST(aggregate_type AS BINARY) AS type_bytes,
       SUM(state = 0 AND NOT (available_at > :now
                              AND (lease_token IS NOT NULL
                                   OR (attempts = 0 AND last_error IS NULL)))),
       SUM(state = 0 AND lease_token IS NULL AND (attempts > 0 OR last_error IS NOT NULL)
           AND available_at > :now2),
       SUM(state = 0 AND lease_token IS NOT NULL AND available_at > :now3),
       SUM(state = 2),
       COALESCE(MIN(CASE WHEN state = 0 AND NOT (lease_token IS NULL AND attempts = 0
                                                 AND last_error IS NULL AND available_at > :now4)
                         THEN created_at END), 0),
       SUM(state = 0 AND lease_token IS NULL AND attempts = 0 AND last_error IS NULL
           AND available_at > :now5)
FROM outbox FORCE INDEX (outbox_claim) WHERE state IN (0, 2)
GROUP BY type_bytes ORDER BY type_bytes
