-- The claim's locking read, for both policies, inside the claim transaction (READ COMMITTED:
-- no gap locks, so the application's INSERTs into the outbox never wait for a relay). Pending
-- is state 0 (outbox::sql::row_state). FORCE INDEX keeps the read on outbox_claim, whose
-- order is the ORDER BY: InnoDB reads (and locks) rows in seq order and stops at the LIMIT;
-- rows other claims hold are skipped, rows that fail the WHERE are unlocked at once.
-- Nothing here looks at other rows (a subquery of a locking read would lock, and skip, what
-- it reads on MariaDB): the per-aggregate check is claim_previous.sql, a plain read.
-- A claim after rows held back behind an earlier row of their aggregate runs again after the
-- last seq seen and leaves those aggregates out (see the store's `claim`).
-- :now (Unix us), :after only rows after this seq (0 for all), :bound only rows up to this seq
-- (claim_scan_bound.sql; the largest bigint for none), :blocked aggregates to leave out ('' for
-- none; else ",HEX(type):HEX(id)," for each, concatenated), :limit.
-- Columns: the message columns of outbox::sql::column, attempts counting this one.
SELECT o.seq, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
       LEAST(o.attempts, 2147483646) + 1, o.created_at, o.content_type
FROM outbox o FORCE INDEX (outbox_claim)
WHERE o.state = 0 AND o.seq > :after AND o.seq <= :bound AND o.available_at <= :now
  AND (:blocked = ''
       OR LOCATE(CONCAT(',', HEX(o.aggregate_type), ':', HEX(o.aggregate_id), ','), :blocked) = 0)
ORDER BY o.seq
LIMIT :limit
FOR UPDATE SKIP LOCKED
