-- Dead-letter triage: a dead letter keeps its cause key (outbox::cause_key: the class that made
-- the relay give up and its error with ids, numbers and quoted values stripped), so thousands
-- of one cause are one group; every row counts how often an operator requeued or replayed it,
-- and when last; discarded dead letters move to outbox_archive, kept until
-- `outbox purge --archive-before AGE`.
-- Applied by outbox::postgresql::migrate after 0007. Rows dead before it have no cause key
-- (''): they form one group, listed as "(none)". NOT NULL, so a group is found by equality
-- (the index below); a constant default adds the column without rewriting the table.
ALTER TABLE outbox
  ADD COLUMN dead_cause  text    NOT NULL DEFAULT '',
  ADD COLUMN replays     integer NOT NULL DEFAULT 0,
  ADD COLUMN replayed_at timestamptz;
-- A group's dead letters, oldest first (groups, requeue --group, discard --group).
CREATE INDEX outbox_dead_by_cause ON outbox (dead_cause, seq) WHERE state = 2;

CREATE TABLE outbox_archive (
  seq            bigint      PRIMARY KEY,  -- the row's seq in the outbox (never reused)
  event_id       uuid        NOT NULL,
  aggregate_type text        NOT NULL,
  aggregate_id   text        NOT NULL,
  event_type     text        NOT NULL,
  payload_bytes  bytea       NOT NULL,
  content_type   text        NOT NULL,
  headers        jsonb       NOT NULL,
  created_at     timestamptz NOT NULL,
  attempts       integer     NOT NULL,
  dead_at        timestamptz,
  last_error     text,
  dead_cause     text        NOT NULL,
  replays        integer     NOT NULL,
  archived_at    timestamptz NOT NULL
);
-- `purge --archive-before`, oldest first.
CREATE INDEX outbox_archive_by_time ON outbox_archive (archived_at, seq);
