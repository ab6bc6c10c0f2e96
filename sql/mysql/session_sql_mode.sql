-- The store's own sessions: no NO_BACKSLASH_ESCAPES (a server's sql_mode may have it), under
-- which the client's escaping leaves a NUL byte in the text and SOCI cuts the statement there:
-- a payload with one (a consumer's dead letter) could not be written. The rest is kept.
SET SESSION sql_mode = TRIM(BOTH ',' FROM REPLACE(CONCAT(',', @@SESSION.sql_mode, ','),
                                                  ',NO_BACKSLASH_ESCAPES,', ','))
