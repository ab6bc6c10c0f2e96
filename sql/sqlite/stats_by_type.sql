-- Backlog per aggregate type, in byte order (BINARY): the type, then the columns of stats.sql
-- (outbox::sql::stats_column) over that type's rows. Only pending (0) and dead (2) rows are
-- read, through outbox_by_state, so published rows kept under retention keep cost nothing; the
-- groups are then sorted (a few rows, one per type).
-- ?1 now (Unix ms).
SELECT aggregate_type,
       sum(state = 0 AND NOT (available_at > ?1
                              AND (lease_token IS NOT NULL
                                   OR (attempts = 0 AND last_error IS NULL)))),
       sum(state = 0 AND lease_token IS NULL AND (attempts > 0 OR last_error IS NOT NULL)
           AND available_at > ?1),
       sum(state = 0 AND lease_token IS NOT NULL AND available_at > ?1),
       sum(state = 2),
       min(CASE WHEN state = 0 AND NOT (lease_token IS NULL AND attempts = 0
                                        AND last_error IS NULL AND available_at > ?1)
                THEN created_at END),
       sum(state = 0 AND lease_token IS NULL AND attempts = 0 AND last_error IS NULL
           AND available_at > ?1)
FROM outbox INDEXED BY outbox_by_state WHERE state IN (0, 2)
GROUP BY aggregate_type ORDER BY aggregate_type
