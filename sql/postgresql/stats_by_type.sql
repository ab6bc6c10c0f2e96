-- Backlog per aggregate type, in byte order (COLLATE "C", whatever the database's collation):
-- the type, then the columns of stats.sql (outbox::sql::stats_column) over that type's rows.
-- Only pending (0) and dead (2) rows are read: "state = 0 OR state = 2" (not IN) lets the
-- planner combine the partial indexes outbox_pending and outbox_settled (a BitmapOr), so
-- published rows kept under retention keep are not scanned once the table is large.
-- $1 now (Unix us).
SELECT aggregate_type,
       count(*) FILTER (WHERE state = 0 AND NOT (available_at > outbox_ts($1::bigint)
                                                 AND (lease_token IS NOT NULL
                                                      OR (attempts = 0 AND last_error IS NULL)))),
       count(*) FILTER (WHERE state = 0 AND lease_token IS NULL
                          AND (attempts > 0 OR last_error IS NOT NULL)
                          AND available_at > outbox_ts($1::bigint)),
       count(*) FILTER (WHERE state = 0 AND lease_token IS NOT NULL
                          AND available_at > outbox_ts($1::bigint)),
       count(*) FILTER (WHERE state = 2),
       coalesce(outbox_us(min(created_at) FILTER (
                  WHERE state = 0 AND NOT (lease_token IS NULL AND attempts = 0
                                           AND last_error IS NULL
                                           AND available_at > outbox_ts($1::bigint)))), 0),
       count(*) FILTER (WHERE state = 0 AND lease_token IS NULL AND attempts = 0
                          AND last_error IS NULL AND available_at > outbox_ts($1::bigint))
FROM outbox WHERE state = 0 OR state = 2
GROUP BY aggregate_type ORDER BY aggregate_type COLLATE "C"
