-- The log-tailing relay's table mode: the writer inserts its rows as state 3 ("streamed"),
-- which the log-tailing relay reads from the WAL (the row's INSERT, through its publication)
-- and deletes once the broker confirmed it. No polling claim, partial index or count looks at
-- state 3: those rows are in none of the pending-row indexes and never claimed from the table.
-- Applied by outbox::postgresql::migrate after 0004.

-- NOT VALID: the constraint only widens, so no existing row needs the scan.
ALTER TABLE outbox DROP CONSTRAINT IF EXISTS outbox_state_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_state_check CHECK (state IN (0, 1, 2, 3)) NOT VALID;

-- The wake-up of polling relays: nothing to say for rows only the log-tailing relay reads (its
-- query on every insert, and a NOTIFY that serializes commits, would be pure cost).
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql
  SET search_path FROM CURRENT AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM outbox_new_rows WHERE state = 0) THEN
    RETURN NULL;
  END IF;
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

-- The log-tailing relay's count of claims of the first batch it reads after its stream opens
-- (at the slot's position): a relay that keeps dying while publishing that batch (a message
-- that crashes it) claims it again and again from the same position; the count becomes the
-- batch's attempts, so the relay dead-letters it once the retry policy says they are spent.
CREATE TABLE outbox_tail_attempts (
  slot     text    PRIMARY KEY,
  position bigint  NOT NULL,  -- the LSN the batch starts at (the end of its first transaction)
  claims   integer NOT NULL
);
