-- Dead-letter triage: a dead letter keeps its cause key (outbox::cause_key: the class that made
-- the relay give up and its error with ids, numbers and quoted values stripped), so thousands
-- of one cause are one group; every row counts how often an operator requeued or replayed it,
-- and when last (Unix ms); discarded dead letters move to outbox_archive, kept until
-- `outbox purge --archive-before AGE`.
-- Applied by outbox::sqlite::store::migrate after 0004. Rows dead before it have no cause key
-- (''): they form one group, listed as "(none)".
ALTER TABLE outbox ADD COLUMN dead_cause TEXT NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN replays INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN replayed_at INTEGER;
-- A group's dead letters, oldest first (groups, requeue --group, discard --group).
CREATE INDEX outbox_dead_by_cause ON outbox (dead_cause, seq) WHERE state = 2;

CREATE TABLE outbox_archive (
  seq            INTEGER NOT NULL,  -- the row's seq in the outbox (SQLite may reuse a seq
                                    -- after a delete: not a key here)
  event_id       TEXT    NOT NULL,
  aggregate_type TEXT    NOT NULL,
  aggregate_id   TEXT    NOT NULL,
  event_type     TEXT    NOT NULL,
  payload        BLOB    NOT NULL,
  content_type   TEXT    NOT NULL,
  headers        TEXT    NOT NULL,
  created_at     INTEGER NOT NULL,
  attempts       INTEGER NOT NULL,
  dead_at        INTEGER,
  last_error     TEXT,
  dead_cause     TEXT    NOT NULL,
  replays        INTEGER NOT NULL,
  archived_at    INTEGER NOT NULL
);
-- `purge --archive-before`, oldest first.
CREATE INDEX outbox_archive_by_time ON outbox_archive (archived_at, seq);
