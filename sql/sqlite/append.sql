-- The writer's insert of one row; the store repeats the VALUES tuple for a multi-row insert
-- (at most 500 rows per statement: SQLite's parameter limit).
-- ?1 event_id (UUID text), ?2 aggregate_type, ?3 aggregate_id, ?4 event_type, ?5 payload (BLOB),
-- ?6 headers (JSON object text), ?7 created_at (Unix ms), ?8 content_type, ?9 available_at
-- (Unix ms; 0: at once; later: a scheduled event, not claimable before it).
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers,
                    created_at, content_type, available_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
