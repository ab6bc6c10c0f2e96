-- What a replay would send (`outbox replay --dry-run`), and whether any published row is kept
-- at all (none: the relay deletes on publish, or everything was purged; a replay is refused).
-- ?1 .. ?5 as in replay.sql.
SELECT count(*), EXISTS (SELECT 1 FROM outbox WHERE state = 1)
FROM outbox INDEXED BY outbox_by_state
WHERE state = 1 AND created_at >= ?1 AND created_at < ?2
  AND (?3 IS NULL OR event_type = ?3) AND (?4 IS NULL OR aggregate_type = ?4)
  AND (?5 IS NULL OR aggregate_id = ?5)
