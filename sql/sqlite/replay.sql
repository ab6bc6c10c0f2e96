-- Replay: at most ?6 published rows (state 1, kept by retention keep) created in [?1, ?2),
-- oldest first, become pending again with their ids (the relay sends them again in seq order,
-- so in their original order per aggregate), their replays counted. Run in a BEGIN IMMEDIATE
-- transaction; a published row is one no relay touches.
-- ?1 created at or after, ?2 created before (Unix ms), ?3 event type, ?4 aggregate type,
-- ?5 aggregate id (each NULL: any), ?6 limit, ?7 now (Unix ms).
UPDATE outbox SET state = 0, attempts = 0, available_at = 0, lease_owner = NULL,
                  lease_token = NULL, published_at = NULL, last_error = NULL,
                  replays = replays + 1, replayed_at = ?7
WHERE seq IN (
    SELECT seq FROM outbox INDEXED BY outbox_by_state
    WHERE state = 1 AND created_at >= ?1 AND created_at < ?2
      AND (?3 IS NULL OR event_type = ?3) AND (?4 IS NULL OR aggregate_type = ?4)
      AND (?5 IS NULL OR aggregate_id = ?5)
    ORDER BY seq LIMIT ?6)
  AND state = 1
