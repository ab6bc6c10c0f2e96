-- The first step of a requeue by group and of a discard, in their transaction: at most :limit
-- dead letters (state 2) matching the filter, oldest first, locked. A dead letter is a row no
-- relay touches (the claim takes state 0, a settle changes only rows still in state 0), and the
-- lock keeps another operator from changing it before the next statements of the transaction
-- (dead_requeue.sql, or dead_archive.sql then dead_delete.sql) move it: a row is requeued once,
-- and is in the outbox or the archive, never both or neither. SKIP LOCKED: a row locked by
-- someone else is being changed (another operator), or is one a relay claimed after a requeue
-- whose old index entry (state 2) InnoDB still holds: either way not this run's to take, and
-- waiting for a relay's claim transaction would stall the operator for its publish.
-- :any_cause (1: any), :cause, :any_type (1: any), :event_type, :since (Unix us, 0: any),
-- :event_id ('': any), :limit.
SELECT seq FROM outbox FORCE INDEX (outbox_claim)
WHERE state = 2 AND (:any_cause = 1 OR dead_cause = :cause)
  AND (:any_type = 1 OR event_type = :event_type) AND COALESCE(dead_at, 0) >= :since
  AND (:event_id = '' OR event_id = :event_id2)
ORDER BY seq LIMIT :limit
FOR UPDATE SKIP LOCKED
