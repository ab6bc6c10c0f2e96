-- The writer transaction's commit in one round trip (writer::begin, appender::commit): the
-- client sends one CALL with the transaction's events, and the procedure inserts them and
-- commits: outbox_commit_one takes one event as bound arguments (the common case, and the
-- cheapest: about the server time of the plain INSERT and COMMIT), outbox_commit any number as
-- one bound JSON argument (JSON_TABLE; about 45-85 us more server time a call here). If the INSERT fails, the procedure stops at the error
-- (no handler): COMMIT does not run, the caller's transaction stays open and the writer rolls
-- it back. @outbox_commit_stage tells the client, after an error, which of the two failed
-- ('insert', or NULL when the procedure did not start: nothing committed; 'commit': a failed
-- COMMIT is in doubt).
-- The argument: a JSON array, one array per event in insertion order: [event_id,
-- aggregate_type, aggregate_id, event_type, payload as base64, headers (JSON object text),
-- created_at (Unix us), content_type, available_at (Unix us)]. SQL SECURITY INVOKER: the
-- caller needs INSERT on outbox (as for the plain append) and EXECUTE on the procedure.
-- Applied by outbox::mysql::store::migrate after 0003; the statements between DELIMITER lines
-- end at the delimiter (as in the mysql client), so this file also runs in `mysql < file`.
DROP PROCEDURE IF EXISTS outbox_commit;
DROP PROCEDURE IF EXISTS outbox_commit_one;

DELIMITER //
CREATE PROCEDURE outbox_commit_one(
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
  SET @outbox_commit_stage = 'insert';
  INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers,
                      created_at, content_type, available_at)
  VALUES (p_event_id, p_aggregate_type, p_aggregate_id, p_event_type, p_payload, p_headers,
          p_created_at, p_content_type, p_available_at);
  SET @outbox_commit_stage = 'commit';
  COMMIT;
  SET @outbox_commit_stage = NULL;
END//

CREATE PROCEDURE outbox_commit(IN events LONGTEXT CHARACTER SET utf8mb4)
  MODIFIES SQL DATA
  SQL SECURITY INVOKER
BEGIN
  SET @outbox_commit_stage = 'insert';
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
  SET @outbox_commit_stage = 'commit';
  COMMIT;
  SET @outbox_commit_stage = NULL;
END//
DELIMITER ;
