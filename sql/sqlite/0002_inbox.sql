-- The consumer's inbox: one row per (consumer, event) applied, committed with the effect.
CREATE TABLE outbox_inbox (
  consumer     TEXT    NOT NULL,
  event_id     TEXT    NOT NULL,
  processed_at INTEGER NOT NULL,
  PRIMARY KEY (consumer, event_id)
);
CREATE INDEX outbox_inbox_by_time ON outbox_inbox (processed_at);

-- Deliveries a consumer gave up on (its handler failed max_attempts times).
CREATE TABLE outbox_inbox_dead (
  consumer       TEXT    NOT NULL,
  event_id       TEXT    NOT NULL,
  aggregate_type TEXT    NOT NULL,
  aggregate_id   TEXT    NOT NULL,
  event_type     TEXT    NOT NULL,
  payload        TEXT    NOT NULL,
  headers        TEXT    NOT NULL,
  error          TEXT    NOT NULL,
  failed_at      INTEGER NOT NULL,
  PRIMARY KEY (consumer, event_id)
);
