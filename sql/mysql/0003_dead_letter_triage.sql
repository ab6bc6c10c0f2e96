-- Dead-letter triage: a dead letter keeps its cause key (outbox::cause_key: the class that made
-- the relay give up and its error with ids, numbers and quoted values stripped), so thousands
-- of one cause are one group; every row counts how often an operator requeued or replayed it,
-- and when last (Unix us); discarded dead letters move to outbox_archive, kept until
-- `outbox purge --archive-before AGE`.
-- Applied by outbox::mysql::store::migrate after 0002, one statement at a time. Rows dead
-- before it have no cause key (empty): they form one group, listed as "(none)".
ALTER TABLE outbox
  ADD COLUMN dead_cause  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
    DEFAULT '',
  ADD COLUMN replays     INT    NOT NULL DEFAULT 0,
  ADD COLUMN replayed_at BIGINT NULL,
  -- The dead letters of a group, oldest first (groups, requeue --group, discard --group).
  ADD KEY outbox_by_cause (state, dead_cause, seq);

CREATE TABLE IF NOT EXISTS outbox_archive (
  seq            BIGINT       NOT NULL,  -- the row's seq in the outbox (never reused)
  event_id       CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  aggregate_type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  aggregate_id   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  event_type     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  payload        LONGBLOB     NOT NULL,
  content_type   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  headers        MEDIUMTEXT   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_at     BIGINT       NOT NULL,
  attempts       INT          NOT NULL,
  dead_at        BIGINT       NULL,
  last_error     TEXT         CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  dead_cause     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  replays        INT          NOT NULL,
  archived_at    BIGINT       NOT NULL,
  PRIMARY KEY (seq),
  -- `purge --archive-before`, oldest first.
  KEY outbox_archive_by_time (archived_at, seq)
) ENGINE = InnoDB;
