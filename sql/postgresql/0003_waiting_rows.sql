-- Rows that wait (for a retry, or under a lease) must hold back only their own aggregate.
-- Applied by outbox::postgresql::migrate after 0001 and 0002.

-- Rows whose available_at has moved off '-infinity' (retried, or stamped by a leasing claim; a
-- release puts '-infinity' back). Few at any time, so "does an earlier row of this aggregate
-- wait?" is one probe into a small index. The claim filters on it BEFORE its LIMIT, so rows
-- held back behind a waiting row never fill a batch (0001's claim applied the LIMIT first: 500
-- rows behind one retrying event made every claim empty, and every other aggregate waited).
-- The claim and the trigger spell the predicate "available_at > '-infinity'" literally, so the
-- planner can match this partial index.
CREATE INDEX outbox_waiting_by_aggregate ON outbox (aggregate_type, aggregate_id, seq)
  WHERE state = 0 AND available_at > '-infinity';

-- The wake-up trigger of 0001, corrected: an older pending row keeps it silent only if a relay
-- can claim that row now (or holds it), not if the row sits behind an earlier row of its
-- aggregate that waits for a retry: then no relay is busy with it, and without the NOTIFY the
-- relay fell back to its slowest poll. The check looks at the 100 oldest candidates at most,
-- so a long backlog behind one failing aggregate costs writers a bounded scan, erring towards
-- a NOTIFY (a spurious wake-up costs one empty claim).
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql
  SET search_path FROM CURRENT AS $$
BEGIN
  IF NOT EXISTS (
      SELECT 1
      FROM (SELECT o.seq, o.aggregate_type, o.aggregate_id FROM outbox o
            WHERE o.state = 0 AND o.seq < (SELECT min(seq) FROM outbox_new_rows)
              AND NOT (o.lease_token IS NULL AND o.available_at > now())
            ORDER BY o.seq LIMIT 100) o
      WHERE NOT EXISTS (SELECT 1 FROM outbox p
                        WHERE p.state = 0 AND p.available_at > '-infinity'
                          AND p.aggregate_type = o.aggregate_type
                          AND p.aggregate_id = o.aggregate_id AND p.seq < o.seq
                          AND p.lease_token IS NULL AND p.available_at > now())) THEN
    PERFORM pg_notify('outbox', '');
  END IF;
  RETURN NULL;
END;
$$;

-- A consumer's dead letters keep what was delivered, whatever it is: a payload from a peer need
-- not be JSON, nor even UTF-8 (jsonb refused the first, 22P02, and so the dead-letter path
-- failed on the content it was keeping). The payload is kept as bytes, the headers as text.
ALTER TABLE outbox_inbox_dead
  ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8'),
  ALTER COLUMN headers TYPE text USING headers::text;

-- Timestamps written by another program may be 'infinity', '-infinity' or beyond what a bigint
-- of microseconds holds: 0001's outbox_us failed on them ("cannot convert infinity to bigint"),
-- inside the claim, dead_letters and stats, so one such row stopped the relay for good. Clamped
-- to the bigint range instead (the library clamps it again to what its clock can represent).
CREATE OR REPLACE FUNCTION outbox_us(t timestamptz) RETURNS bigint
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT least(greatest(extract(epoch FROM t) * 1000000, -9223372036854775808),
                     9223372036854775807)::bigint $$;
