-- The consumer's inbox: one row per (consumer, event) applied, committed with the effect.
CREATE TABLE outbox_inbox (
  consumer     text        NOT NULL,
  event_id     uuid        NOT NULL,
  processed_at timestamptz NOT NULL,
  PRIMARY KEY (consumer, event_id)
);
CREATE INDEX outbox_inbox_by_time ON outbox_inbox (processed_at);

-- Deliveries a consumer gave up on (its handler failed max_attempts times).
CREATE TABLE outbox_inbox_dead (
  consumer       text        NOT NULL,
  event_id       uuid        NOT NULL,
  aggregate_type text        NOT NULL,
  aggregate_id   text        NOT NULL,
  event_type     text        NOT NULL,
  payload        jsonb       NOT NULL,
  headers        jsonb       NOT NULL,
  error          text        NOT NULL,
  failed_at      timestamptz NOT NULL,
  PRIMARY KEY (consumer, event_id)
);
