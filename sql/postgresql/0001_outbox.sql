-- outbox schema for PostgreSQL 13+.
-- Applied by outbox::postgresql::migrate, which records the version in outbox_schema_migrations.

CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
  version    integer PRIMARY KEY,
  name       text        NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);

-- Timestamps cross the wire as Unix microseconds (exact, no time zone parsing); these two
-- inlinable functions convert.
CREATE FUNCTION outbox_ts(us bigint) RETURNS timestamptz
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT timestamptz 'epoch' + us * interval '1 microsecond' $$;
CREATE FUNCTION outbox_us(t timestamptz) RETURNS bigint
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
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
-- this library) wake the relay too; NOTIFY is delivered only when the transaction commits, and
-- several notifications of one transaction on one channel with one payload are folded into one.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('outbox', '');
  RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
  FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
