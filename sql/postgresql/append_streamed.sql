-- The log-tailing relay's table-mode writer: append.sql's insert as state 3 (streamed), read
-- by the log-tailing relay from the WAL and never claimed from the table. The store repeats
-- the VALUES tuple (renumbering the parameters) for a multi-row insert of at most 500 rows.
-- $1 event_id (UUID text), $2 aggregate_type, $3 aggregate_id, $4 event_type, $5 payload
-- (bytea, sent in binary), $6 headers (JSON object text), $7 created_at (Unix us),
-- $8 content_type, $9 available_at (Unix us; 0: at once, stored as '-infinity', the value the
-- partial index outbox_waiting_by_aggregate leaves out; later: a scheduled event).
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload_bytes,
                    headers, created_at, content_type, state, available_at)
VALUES ($1::uuid, $2, $3, $4, $5::bytea, $6::jsonb, outbox_ts($7::bigint), $8, 3,
        coalesce(outbox_ts(nullif($9::bigint, 0)), '-infinity'))
