-- What a replay would send (`outbox replay --dry-run`), and whether any published row is kept
-- at all (none: the relay deletes on publish, or everything was purged; a replay is refused).
-- The filter of replay_select.sql.
SELECT COUNT(*), EXISTS (SELECT 1 FROM outbox FORCE INDEX (outbox_claim) WHERE state = 1)
FROM outbox FORCE INDEX (outbox_claim)
WHERE state = 1 AND created_at >= :since AND created_at < :until
  AND (:event_type = '' OR event_type = :event_type2)
  AND (:aggregate_type = '' OR aggregate_type = :aggregate_type2)
  AND (:aggregate_id = '' OR aggregate_id = :aggregate_id2)
