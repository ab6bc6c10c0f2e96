-- The claim (leasing, the only policy on SQLite): stamps lease expiry, owner, fencing token and
-- one more attempt on the oldest claimable rows, and returns them (in no particular order: the
-- store sorts by seq). A row is claimable when pending (state 0, outbox::sql::row_state),
-- its time has come, and no earlier pending row of its aggregate is waiting (under a lease or
-- for a retry: the small partial index of 0004_waiting_rows.sql, whose predicate the probe
-- repeats). Runs inside BEGIN IMMEDIATE. With a scan limit (claim_request::scan_limit, the
-- relay's claims made ahead) only the ?6 oldest claimable rows are looked at: the bound is the
-- seq of the ?6-th, found by a walk of the state index that stops there, and the main walk is a
-- range up to it (a LIMIT on a subquery instead made SQLite sort every candidate).
-- ?1 lease expiry (Unix ms), ?2 owner, ?3 fencing token, ?4 now (Unix ms), ?5 limit,
-- ?6 scan limit (0: none).
-- Columns: the message columns of outbox::sql::column, in order.
UPDATE outbox SET available_at = ?1, lease_owner = ?2, lease_token = ?3,
                  attempts = attempts + 1
WHERE seq IN (
  SELECT o.seq FROM outbox AS o INDEXED BY outbox_by_state
  WHERE o.state = 0 AND o.available_at <= ?4
    AND o.seq <= CASE WHEN ?6 > 0 THEN
                   coalesce((SELECT b.seq FROM outbox AS b INDEXED BY outbox_by_state
                             WHERE b.state = 0 AND b.available_at <= ?4
                             ORDER BY b.seq LIMIT 1 OFFSET ?6 - 1), 9223372036854775807)
                 ELSE 9223372036854775807 END
    AND NOT EXISTS (SELECT 1 FROM outbox AS p INDEXED BY outbox_waiting_by_aggregate
                    WHERE p.state = 0 AND p.available_at > 0
                      AND p.aggregate_type = o.aggregate_type
                      AND p.aggregate_id = o.aggregate_id AND p.seq < o.seq
                      AND p.available_at > ?4)
  ORDER BY o.seq LIMIT ?5)
RETURNING seq, event_id, aggregate_type, aggregate_id, event_type, payload, headers, attempts,
          created_at, content_type
