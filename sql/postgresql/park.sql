-- The log-tailing relay's park: an event read from the WAL that was not published (a failed
-- attempt waiting for its retry, one released behind its aggregate's failure, one of an
-- aggregate that already has rows here, or a dead letter) becomes a row of the outbox table,
-- where the retries are claimed. The store repeats the VALUES tuple (renumbering the
-- parameters) for several rows. A row already there is left as it is (the stream replayed after
-- a restart), unless it is the streamed row (state 3) of the table mode: that one takes the
-- fate, and a new seq (the table claims an aggregate's rows by seq: they must be in the order
-- they are parked, which is commit order, not the order the writers inserted them in). The
-- store parks rows in stream order.
-- $1 event_id (UUID text), $2 aggregate_type, $3 aggregate_id, $4 event_type, $5 payload
-- (bytea, sent in binary), $6 headers (JSON object text), $7 created_at (Unix us),
-- $8 content_type, $9 state (0 pending, 2 dead), $10 available_at (Unix us; NULL: claimable now, not waiting for a retry), $11 attempts,
-- $12 dead_at (Unix us, or NULL), $13 last_error (a dead letter's, a deferral's, or NULL),
-- $14 dead_cause (a dead letter's cause key, outbox::cause_key, or NULL). A scheduled event not
-- due yet is parked pending with its time as available_at, no attempt and no last error
-- (stats.sql counts it as scheduled); a deferred one (never attempted before) with its time
-- and its last error (stats.sql counts it as pending, waiting).
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload_bytes,
                    headers, created_at, content_type, state, available_at, attempts, dead_at,
                    last_error, dead_cause)
VALUES ($1::uuid, $2, $3, $4, $5::bytea, $6::jsonb, outbox_ts($7::bigint), $8, $9::smallint,
        coalesce(outbox_ts($10::bigint), '-infinity'), $11::integer, outbox_ts($12::bigint), $13,
        coalesce($14, ''))
ON CONFLICT (event_id) DO UPDATE
  SET seq = DEFAULT, state = excluded.state, available_at = excluded.available_at,
      attempts = excluded.attempts, dead_at = excluded.dead_at, last_error = excluded.last_error,
      dead_cause = excluded.dead_cause
  WHERE outbox.state = 3
