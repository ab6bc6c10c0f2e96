-- outbox schema for SQLite 3.35+ (UPDATE ... RETURNING).
-- Applied by outbox::sqlite::migrate, which records the version in outbox_schema_migrations.
-- Times are Unix milliseconds.

CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
  version    INTEGER PRIMARY KEY,
  name       TEXT    NOT NULL,
  applied_at INTEGER NOT NULL
);

CREATE TABLE outbox (
  seq            INTEGER PRIMARY KEY,      -- the rowid: insertion (= commit) order
  event_id       TEXT    NOT NULL UNIQUE,  -- UUIDv7, canonical text
  aggregate_type TEXT    NOT NULL,
  aggregate_id   TEXT    NOT NULL,
  event_type     TEXT    NOT NULL,
  payload        TEXT    NOT NULL,         -- JSON, validated by the writer
  headers        TEXT    NOT NULL DEFAULT '{}',
  created_at     INTEGER NOT NULL,
  state          INTEGER NOT NULL DEFAULT 0 CHECK (state IN (0, 1, 2)),  -- 0 pending, 1 published, 2 dead
  available_at   INTEGER NOT NULL DEFAULT 0,  -- claimable from then on: lease expiry or retry time
  attempts       INTEGER NOT NULL DEFAULT 0,
  lease_owner    TEXT,
  lease_token    INTEGER,                  -- fencing token of the claim that holds the row
  published_at   INTEGER,
  dead_at        INTEGER,
  last_error     TEXT
);

-- The claim walks pending rows in seq order. SQLite 3.40 does not use a partial index
-- "(seq) WHERE state = 0" for ORDER BY ... LIMIT, so the state is the index's first column.
CREATE INDEX outbox_by_state ON outbox (state, seq);

-- Per-aggregate ordering: "is an earlier row of this aggregate still pending but not claimable?"
-- Partial, so published rows leave it and it stays small.
CREATE INDEX outbox_pending_by_aggregate ON outbox (aggregate_type, aggregate_id, seq)
  WHERE state = 0;
