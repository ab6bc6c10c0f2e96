-- outbox schema for PostgreSQL 13+.
-- Applied by outbox::postgresql::migrate, which records the version in outbox_schema_migrations.

CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
  version    integer PRIMARY KEY,
  name       text        NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);

-- Timestamps cross the wire as Unix microseconds (exact, no time zone parsing); these two
-- functions convert. STABLE, like the timestamptz arithmetic inside, so the planner inlines them.
CREATE FUNCTION outbox_ts(us bigint) RETURNS timestamptz
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT timestamptz 'epoch' + us * interval '1 microsecond' $$;
CREATE FUNCTION outbox_us(t timestamptz) RETURNS bigint
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;

CREATE TABLE outbox (
  seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- insertion order
  event_id       uuid        NOT NULL UNIQUE,                       -- UUIDv7
  aggregate_type text        NOT NULL,
  aggregate_id   text        NOT NULL,
  event_type     text        NOT NULL,
  payload        jsonb       NOT NULL,
  headers        jsonb       NOT NULL DEFAULT '{}',
  created_at     timestamptz NOT NULL,
  state          smallint    NOT NULL DEFAULT 0 CHECK (state IN (0, 1, 2)),  -- pending, published, dead
  available_at   timestamptz NOT NULL DEFAULT '-infinity',  -- claimable from then on (lease expiry, retry time)
  attempts       integer     NOT NULL DEFAULT 0,
  lease_owner    text,
  lease_token    bigint,                                    -- fencing token of the claim holding the row
  published_at   timestamptz,
  dead_at        timestamptz,
  last_error     text
);

-- The claim walks pending rows in seq order (PostgreSQL uses partial indexes for this).
CREATE INDEX outbox_pending ON outbox (seq) WHERE state = 0;
-- "Is an earlier row of this aggregate still pending?" (per-aggregate order).
CREATE INDEX outbox_pending_by_aggregate ON outbox (aggregate_type, aggregate_id, seq) WHERE state = 0;
-- Dead letters and purges of published rows.
CREATE INDEX outbox_settled ON outbox (state, seq) WHERE state <> 0;

-- Wake relays on commit: a statement-level trigger, so rows written by any program (not only
-- this library) wake the relay too; NOTIFY is delivered only when the transaction commits.
-- It notifies only when no older row is pending and either claimable or in flight: otherwise
-- the relay is busy (it never sleeps between full batches) or has been woken already. Rows
-- waiting for a retry do not count, so a failing event does not silence the trigger. This
-- matters: a transaction that issued NOTIFY takes a database-wide lock at commit, so notifying
-- on every insert serializes all writers' commits (measured: 8 writers kept 0.28 of their
-- throughput). A wake-up missed in a race with the relay going idle is caught by its polling
-- fallback, which is short right after activity (it doubles from 5 ms).
-- SET search_path FROM CURRENT: the function reads the outbox of the schema it was created in,
-- whatever the inserting session's search_path.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql
  SET search_path FROM CURRENT AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM outbox
                 WHERE state = 0 AND seq < (SELECT min(seq) FROM outbox_new_rows)
                   AND NOT (lease_token IS NULL AND available_at > now())) THEN
    PERFORM pg_notify('outbox', '');
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
  REFERENCING NEW TABLE AS outbox_new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
