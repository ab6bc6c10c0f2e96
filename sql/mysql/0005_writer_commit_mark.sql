-- The writer transaction's commit procedures (0004_writer_commit.sql) again, each CALL with a
-- mark of its own (the client's: its first event's id, unique to the call) as first argument.
-- The procedures set @outbox_commit_stage to '<mark>:insert', '<mark>:commit' and
-- '<mark>:done'; after a failed CALL the client reads it (one more round trip, on that path
-- only): its mark with 'insert' -> the INSERT failed, COMMIT did not run (the transaction is
-- still open: the client rolls it back); 'commit' -> COMMIT failed or was interrupted, in
-- doubt; 'done' -> committed (the error came after COMMIT: KILL QUERY at the procedure's end);
-- anything else (NULL, another call's stage) -> the procedure did not start, nothing
-- committed. 0004's stages ('insert', 'commit', NULL at the end) could not tell a CALL
-- interrupted after its COMMIT from one that never started. The extra argument also makes a
-- client of this version fail with 1318 (misconfigured) on 0004's procedures, and back.
-- The argument of outbox_commit, and the rest, as in 0004.
DROP PROCEDURE IF EXISTS outbox_commit;
DROP PROCEDURE IF EXISTS outbox_commit_one;

DELIMITER //
CREATE PROCEDURE outbox_commit_one(
  IN p_mark           CHAR(36)     CHARACTER SET ascii,
  IN p_event_id       CHAR(36)     CHARACTER SET ascii,
  IN p_aggregate_type VARCHAR(255) CHARACTER SET utf8mb4,
  IN p_aggregate_id   VARCHAR(255) CHARACTER SET utf8mb4,
  IN p_event_type     VARCHAR(255) CHARACTER SET utf8mb4,
  IN p_payload        LONGBLOB,
  IN p_headers        MEDIUMTEXT   CHARACTER SET utf8mb4,
  IN p_created_at     BIGINT,
  IN p_content_type   VARCHAR(255) CHARACTER SET utf8mb4,
  IN p_available_at   BIGINT)
  MODIFIES SQL DATA
  SQL SECURITY INVOKER
BEGIN
  SET @outbox_commit_stage = CONCAT(p_mark, ':insert');
  INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers,
                      created_at, content_type, available_at)
  VALUES (p_event_id, p_aggregate_type, p_aggregate_id, p_event_type, p_payload, p_headers,
          p_created_at, p_content_type, p_available_at);
  SET @outbox_commit_stage = CONCAT(p_mark, ':commit');
  COMMIT;
  SET @outbox_commit_stage = CONCAT(p_mark, ':done');
END//

CREATE PROCEDURE outbox_commit(IN p_mark CHAR(36) CHARACTER SET ascii,
                               IN events LONGTEXT CHARACTER SET utf8mb4)
  MODIFIES SQL DATA
  SQL SECURITY INVOKER
BEGIN
  SET @outbox_commit_stage = CONCAT(p_mark, ':insert');
  INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers,
                      created_at, content_type, available_at)
  SELECT e.event_id, e.aggregate_type, e.aggregate_id, e.event_type, FROM_BASE64(e.payload),
         e.headers, e.created_at, e.content_type, e.available_at
  FROM JSON_TABLE(events, '$[*]' COLUMNS (
         n              FOR ORDINALITY,
         event_id       VARCHAR(36) CHARACTER SET ascii PATH '$[0]' ERROR ON EMPTY,
         aggregate_type LONGTEXT CHARACTER SET utf8mb4 PATH '$[1]' ERROR ON EMPTY,
         aggregate_id   LONGTEXT CHARACTER SET utf8mb4 PATH '$[2]' ERROR ON EMPTY,
         event_type     LONGTEXT CHARACTER SET utf8mb4 PATH '$[3]' ERROR ON EMPTY,
         payload        LONGTEXT CHARACTER SET ascii PATH '$[4]' ERROR ON EMPTY,
         headers        LONGTEXT CHARACTER SET utf8mb4 PATH '$[5]' ERROR ON EMPTY,
         created_at     BIGINT PATH '$[6]' ERROR ON EMPTY,
         content_type   LONGTEXT CHARACTER SET utf8mb4 PATH '$[7]' ERROR ON EMPTY,
         available_at   BIGINT PATH '$[8]' ERROR ON EMPTY)) AS e
  ORDER BY e.n;
  SET @outbox_commit_stage = CONCAT(p_mark, ':commit');
  COMMIT;
  SET @outbox_commit_stage = CONCAT(p_mark, ':done');
END//
DELIMITER ;
