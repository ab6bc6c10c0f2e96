-- Content types and the consumer's inbox. Applied by outbox::mysql::store::migrate after 0001.
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: if this file fails half-way (the server went away),
-- look at the outbox table before running migrate again.

-- Payloads are bytes with a content type; rows written before are JSON.
ALTER TABLE outbox
  ADD COLUMN content_type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
    DEFAULT 'application/json' AFTER payload;

-- The consumer's inbox: one row per (consumer, event) applied, committed with the effect.
CREATE TABLE IF NOT EXISTS outbox_inbox (
  consumer     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  event_id     CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  processed_at BIGINT       NOT NULL,                    -- Unix us
  PRIMARY KEY (consumer, event_id),
  KEY outbox_inbox_by_time (processed_at)
) ENGINE = InnoDB;

-- A delivery is kept whatever it is: the payload as bytes, the texts made storable.
CREATE TABLE IF NOT EXISTS outbox_inbox_dead (
  consumer       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  event_id       CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  aggregate_type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  aggregate_id   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  event_type     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  payload        LONGBLOB     NOT NULL,
  content_type   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  headers        MEDIUMTEXT   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  error          TEXT         CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  failed_at      BIGINT       NOT NULL,                  -- Unix us
  PRIMARY KEY (consumer, event_id)
) ENGINE = InnoDB;
