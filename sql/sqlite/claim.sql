-- The claim (leasing, the only policy on SQLite): stamps lease expiry, owner, fencing token and
-- one more attempt on the oldest claimable rows, and returns them (in no particular order: the
-- store sorts by seq). A row is claimable when pending (state 0, outbox::store::row_state),
-- its time has come, and no earlier pending row of its aggregate is waiting (under a lease or
-- for a retry). Runs inside BEGIN IMMEDIATE.
-- ?1 lease expiry (Unix ms), ?2 owner, ?3 fencing token, ?4 now (Unix ms), ?5 limit.
-- Columns: the message columns of outbox::store::column, in order.
UPDATE outbox SET available_at = ?1, lease_owner = ?2, lease_token = ?3,
                  attempts = attempts + 1
WHERE seq IN (
  SELECT o.seq FROM outbox AS o INDEXED BY outbox_by_state
  WHERE o.state = 0 AND o.available_at <= ?4
    AND NOT EXISTS (SELECT 1 FROM outbox AS p INDEXED BY outbox_pending_by_aggregate
                    WHERE p.state = 0 AND p.aggregate_type = o.aggregate_type
                      AND p.aggregate_id = o.aggregate_id AND p.seq < o.seq
                      AND p.available_at > ?4)
  ORDER BY o.seq LIMIT ?5)
RETURNING seq, event_id, aggregate_type, aggregate_id, event_type, payload, headers, attempts,
          created_at, content_type
