-- The claim dead-letters the rows it cannot read (written by another program), with the
-- reason, in the claim's transaction (locking) or fenced by its token (leasing).
-- $1 seqs (bigint[]), $2 reasons (text[]), $3 attempts to add (1 under locking, whose claim
-- wrote none; 0 under leasing), $4 fencing token (NULL under locking), $5 now (Unix us),
-- $6 cause keys (text[], outbox::cause_key).
UPDATE outbox o SET state = 2, dead_at = outbox_ts($5::bigint), last_error = u.err,
                    dead_cause = u.cause,
                    attempts = least(o.attempts, 2147483646) + $3, lease_owner = NULL,
                    lease_token = NULL
FROM unnest($1::bigint[], $2::text[], $6::text[]) AS u(seq, err, cause)
WHERE o.seq = u.seq AND o.state = 0 AND ($4::bigint IS NULL OR o.lease_token = $4::bigint)
