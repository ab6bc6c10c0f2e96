-- A claim with a scan limit (claim_request::scan_limit: the relay's claims made ahead) looks
-- only at the :scan oldest claimable rows: this plain read, before the locking read, finds the
-- seq of the :scan-th (none: fewer rows, no bound), and claim.sql stops there instead of
-- crossing a hot aggregate's backlog held back behind the batch in flight.
-- :now (Unix us), :skip = :scan - 1.
SELECT seq FROM outbox FORCE INDEX (outbox_claim)
WHERE state = 0 AND available_at <= :now ORDER BY seq LIMIT 1 OFFSET :skip
