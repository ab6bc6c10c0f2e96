-- The writer's transaction (outbox::writer::begin) wakes the relay itself, once per
-- transaction, in the pipeline that carries its events and COMMIT (wake.sql), and says so in a
-- transaction-local setting, outbox.writer_wakes = 'on'; the trigger then stays out of its way
-- (its WHEN is checked before the function is called). Rows written any other way (another
-- program, the plain enqueue) still wake the relay through the trigger, as before.
-- Applied by outbox::postgresql::migrate after 0008.

-- The trigger's check, as a function of its own: notify unless an older pending row is
-- claimable now or held (then a relay is busy, or has been woken already); see 0003. `first`:
-- the first new row (null: every pending row is older, as when called before the INSERT).
CREATE FUNCTION outbox_wake_if_idle(first bigint) RETURNS void LANGUAGE plpgsql
  SET search_path FROM CURRENT AS $$
BEGIN
  IF NOT EXISTS (
      SELECT 1
      FROM (SELECT o.seq, o.aggregate_type, o.aggregate_id FROM outbox o
            WHERE o.state = 0 AND (first IS NULL OR o.seq < first)
              AND NOT (o.lease_token IS NULL AND o.available_at > now())
            ORDER BY o.seq LIMIT 100) o
      WHERE NOT EXISTS (SELECT 1 FROM outbox p
                        WHERE p.state = 0 AND p.available_at > '-infinity'
                          AND p.aggregate_type = o.aggregate_type
                          AND p.aggregate_id = o.aggregate_id AND p.seq < o.seq
                          AND p.lease_token IS NULL AND p.available_at > now())) THEN
    PERFORM pg_notify('outbox', '');
  END IF;
END;
$$;

CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql
  SET search_path FROM CURRENT AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM outbox_new_rows WHERE state = 0) THEN
    PERFORM outbox_wake_if_idle((SELECT min(seq) FROM outbox_new_rows));
  END IF;
  RETURN NULL;
END;
$$;

DROP TRIGGER outbox_notify ON outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
  REFERENCING NEW TABLE AS outbox_new_rows
  FOR EACH STATEMENT
  WHEN (current_setting('outbox.writer_wakes', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION outbox_notify();
