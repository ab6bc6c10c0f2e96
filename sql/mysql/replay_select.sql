-- Replay, its first step, a plain read: at most :limit published rows (state 1, kept by
-- retention keep) created in [:since, :until), oldest first; replay.sql then makes them
-- pending by primary key.
-- :since, :until (Unix us), :event_type, :aggregate_type, :aggregate_id ('': any), :limit.
SELECT seq FROM outbox FORCE INDEX (outbox_claim)
WHERE state = 1 AND created_at >= :since AND created_at < :until
  AND (:event_type = '' OR event_type = :event_type2)
  AND (:aggregate_type = '' OR aggregate_type = :aggregate_type2)
  AND (:aggregate_id = '' OR aggregate_id = :aggregate_id2)
ORDER BY seq LIMIT :limit
