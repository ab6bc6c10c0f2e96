-- The settle, one statement for both policies and both retentions.
-- - leasing ($1 is the claim's fencing token): touches only rows still held under the token,
--   and gives a released or deferred row its attempt back;
-- - locking ($1 is NULL): runs in the claim transaction and commits it; no fence is needed
--   (the row locks), a released row is left alone (its lock goes with the commit), a deferred
--   row gets its time and keeps its attempts, and a failed row's attempt is counted here,
--   since the claim wrote nothing.
-- Published rows become published (state 1) under retention keep, or are deleted under
-- delete_on_publish ($8); only one of the two CTEs does anything (a one-time filter).
-- The fates of the other rows arrive as unnest arrays: kind 2 retry, 3 dead, 4 release, 5 defer
-- (a release until its time: the row then holds its aggregate back as a retry does, and, with
-- no last error, gets its error, the mark stats.sql tells it from a scheduled event by)
-- (outbox::sql::fate_code); states 0 pending, 1 published, 2 dead (outbox::sql::row_state).
-- Returns the four counts: published, retried, dead, released (deferred ones included).
-- $1 fencing token (NULL under locking), $2 now (Unix us), $3 published seqs (bigint[]),
-- $4 other seqs, $5 their kinds (int[]), $6 retry or defer times (Unix us, bigint[]), $7 errors
-- (text[]), $8 delete published rows (boolean: retention delete_on_publish), $9 cause keys of
-- the other rows (text[], kept by a dead letter: outbox::cause_key).
WITH pub_keep AS (
  UPDATE outbox SET state = 1, published_at = outbox_ts($2::bigint), lease_owner = NULL,
                    lease_token = NULL
  WHERE NOT $8::boolean AND seq = ANY($3::bigint[])
    AND ($1::bigint IS NULL OR lease_token = $1::bigint) AND state = 0
  RETURNING 1),
pub_delete AS (
  DELETE FROM outbox
  WHERE $8::boolean AND seq = ANY($3::bigint[])
    AND ($1::bigint IS NULL OR lease_token = $1::bigint) AND state = 0
  RETURNING 1),
f AS (SELECT * FROM unnest($4::bigint[], $5::int[], $6::bigint[], $7::text[], $9::text[])
      AS f(seq, kind, at, err, cause)),
oth AS (
  UPDATE outbox o SET
    state = CASE WHEN f.kind = 3 THEN 2 ELSE 0 END,
    available_at = CASE f.kind WHEN 2 THEN outbox_ts(f.at) WHEN 5 THEN outbox_ts(f.at)
                   WHEN 4 THEN '-infinity' ELSE o.available_at END,
    attempts = CASE
                 WHEN $1::bigint IS NOT NULL AND f.kind IN (4, 5)
                   THEN greatest(o.attempts, 1) - 1
                 WHEN $1::bigint IS NULL AND f.kind IN (2, 3)
                   THEN least(o.attempts, 2147483646) + 1
                 ELSE o.attempts END,
    dead_at = CASE WHEN f.kind = 3 THEN outbox_ts($2::bigint) ELSE o.dead_at END,
    last_error = CASE WHEN f.kind IN (2, 3) THEN f.err
                      WHEN f.kind = 5 THEN coalesce(o.last_error, f.err) ELSE o.last_error END,
    dead_cause = CASE WHEN f.kind = 3 THEN f.cause ELSE o.dead_cause END,
    lease_owner = NULL, lease_token = NULL
  FROM f
  WHERE o.seq = f.seq AND o.state = 0
    AND ($1::bigint IS NULL OR o.lease_token = $1::bigint)
    AND ($1::bigint IS NOT NULL OR f.kind <> 4)
  RETURNING f.kind)
SELECT (SELECT count(*) FROM pub_keep) + (SELECT count(*) FROM pub_delete),
       (SELECT count(*) FROM oth WHERE kind = 2), (SELECT count(*) FROM oth WHERE kind = 3),
       (SELECT count(*) FROM oth WHERE kind IN (4, 5))
