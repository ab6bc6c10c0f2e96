-- Discard, its first step: copies at most ?5 dead letters (state 2) matching the filter,
-- oldest first, to outbox_archive; dead_delete.sql then removes the rows archived at ?6 from
-- the outbox, in the same BEGIN IMMEDIATE transaction (SQLite has one writer: nothing changes
-- between the two), so a row is in one table or the other, never both or neither. A dead
-- letter is a row no relay touches (the claim takes state 0, a settle changes only rows still
-- in state 0).
-- ?1 cause key, ?2 event type, ?3 dead at or after (Unix ms), ?4 event id (each NULL: any),
-- ?5 limit, ?6 now (Unix ms, the archive time).
INSERT INTO outbox_archive (seq, event_id, aggregate_type, aggregate_id, event_type, payload,
                            content_type, headers, created_at, attempts, dead_at, last_error,
                            dead_cause, replays, archived_at)
SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload, content_type, headers,
       created_at, attempts, dead_at, last_error, dead_cause, replays, ?6
FROM outbox INDEXED BY outbox_by_state
WHERE state = 2 AND (?1 IS NULL OR dead_cause = ?1) AND (?2 IS NULL OR event_type = ?2)
  AND (?3 IS NULL OR dead_at >= ?3) AND (?4 IS NULL OR event_id = ?4)
ORDER BY seq LIMIT ?5
