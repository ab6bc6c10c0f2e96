-- outbox schema for MySQL 8.0+ and MariaDB 10.6+ (InnoDB): SQL both accept.
-- Applied by outbox::mysql::store::migrate, one statement at a time (MySQL commits DDL
-- implicitly, so a migration is not one transaction), which records the version in
-- outbox_schema_migrations. The schema comes in the two steps of the other stores' history
-- (the outbox, then content types and the inbox of the store kit), so an upgrade from the
-- first is tested the same way on every store.
-- Times are Unix microseconds (BIGINT): exact, and no session time zone can shift them.
-- Text is utf8mb4 with binary collation: 'A' and 'a' are different aggregates, as on the other
-- stores (the server's default collation is usually case-insensitive).

CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
  version    INT          NOT NULL PRIMARY KEY,
  name       VARCHAR(200) NOT NULL,
  applied_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS outbox (
  seq            BIGINT       NOT NULL AUTO_INCREMENT,   -- insertion order
  event_id       CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,  -- UUIDv7 text
  aggregate_type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  aggregate_id   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  event_type     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  payload        LONGBLOB     NOT NULL,                  -- the writer's bytes, exactly
  headers        MEDIUMTEXT   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,  -- JSON object
  created_at     BIGINT       NOT NULL,
  state          TINYINT      NOT NULL DEFAULT 0,        -- 0 pending, 1 published, 2 dead
  available_at   BIGINT       NOT NULL DEFAULT 0,        -- claimable from then on (lease, retry)
  attempts       INT          NOT NULL DEFAULT 0,
  lease_owner    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  lease_token    BIGINT       NULL,                      -- fencing token of the leasing claim
  published_at   BIGINT       NULL,
  dead_at        BIGINT       NULL,
  last_error     TEXT         CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  PRIMARY KEY (seq),
  UNIQUE KEY outbox_event_id (event_id),
  -- The claim walks pending rows in seq order: this index matches its WHERE state = 0 ...
  -- ORDER BY seq, so the locking read stops after LIMIT rows instead of sorting (a filesort
  -- makes SKIP LOCKED lock every row it reads). No partial indexes here, so the state leads;
  -- dead letters and purges of published rows use the same index.
  KEY outbox_claim (state, seq),
  -- "The previous pending row of this aggregate" (per-aggregate order): one dive per row.
  KEY outbox_by_aggregate (state, aggregate_type, aggregate_id, seq),
  CONSTRAINT outbox_state CHECK (state IN (0, 1, 2))
) ENGINE = InnoDB;
