-- Rows that wait (under a lease, or for a retry) must hold back only their own aggregate, and
-- finding them must not cost a walk over the aggregate's backlog. The claim's "is an earlier row
-- of this aggregate waiting?" probed outbox_pending_by_aggregate, which holds every pending row:
-- for the k-th candidate of a hot aggregate it stepped over the k-1 claimable rows before it, so
-- a 500-row batch of one aggregate cost about 125,000 index steps (relay::run on 60,000 events
-- of one aggregate: 0.14 of the rate over one aggregate per event). Rows get available_at > 0
-- only from a lease or a retry (appended rows have 0; a release and a requeue put 0 back), and
-- few rows wait at a time, so this index stays small and the probe is one seek into it. The
-- claim names it (INDEXED BY) and spells the predicate "available_at > 0" literally, so SQLite
-- can use the partial index whatever its statistics say.
CREATE INDEX outbox_waiting_by_aggregate ON outbox (aggregate_type, aggregate_id, seq)
  WHERE state = 0 AND available_at > 0;

-- outbox_pending_by_aggregate, which the claim no longer reads, stays: a relay of the previous
-- release names it (INDEXED BY) and keeps running against the migrated database until it is
-- upgraded. A later migration drops it.
