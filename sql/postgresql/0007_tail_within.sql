-- The log-tailing relay's progress inside a transaction. The slot (and the settled position of
-- 0006) moves by whole transactions, so a relay that died in a later batch of a transaction
-- larger than a batch started again at that transaction's first event, sent its first batches
-- again each time, and charged each restart to the first batch. The relay now also keeps how
-- many of the first events of the transaction after its settled position are settled
-- (published, or in the outbox table), skips them when the stream shows that transaction
-- again, and counts the claims of a head batch by where in its transaction it starts.
-- Applied by outbox::postgresql::migrate after 0006.
ALTER TABLE outbox_tail_positions
  ADD COLUMN within_end    bigint NOT NULL DEFAULT 0,  -- the end (an LSN) of that transaction
  ADD COLUMN within_events bigint NOT NULL DEFAULT 0;  -- its first events settled
ALTER TABLE outbox_tail_attempts
  ADD COLUMN within bigint NOT NULL DEFAULT 0;  -- the batch's first event, in its transaction
