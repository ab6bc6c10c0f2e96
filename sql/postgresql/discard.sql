-- Moves at most $5 dead letters (state 2), oldest first, to outbox_archive: in one statement,
-- so a row is in one table or the other, never both or neither. Only dead letters move, and
-- the state is checked again on each row after its lock: a row requeued meanwhile (pending
-- again, perhaps claimed by a relay) stays in the outbox; a relay's settle changes only rows in
-- state 0, so it never races a discard for the same row.
-- $1 cause key (NULL: any), $2 event type (NULL: any), $3 dead at or after (Unix us, NULL: any),
-- $4 event id (UUID text, NULL: any), $5 limit, $6 now (Unix us, the archive time).
WITH moved AS (
  DELETE FROM outbox WHERE seq IN (
      SELECT seq FROM outbox
      WHERE state = 2 AND ($1::text IS NULL OR dead_cause = $1::text)
        AND ($2::text IS NULL OR event_type = $2::text)
        AND ($3::bigint IS NULL OR dead_at >= outbox_ts($3::bigint))
        AND ($4::uuid IS NULL OR event_id = $4::uuid)
      ORDER BY seq LIMIT $5)
    AND state = 2
  RETURNING *)
INSERT INTO outbox_archive (seq, event_id, aggregate_type, aggregate_id, event_type,
                            payload_bytes, content_type, headers, created_at, attempts, dead_at,
                            last_error, dead_cause, replays, archived_at)
SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload_bytes, content_type,
       headers, created_at, attempts, dead_at, last_error, dead_cause, replays,
       outbox_ts($6::bigint)
FROM moved
