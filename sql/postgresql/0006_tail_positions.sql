-- The log-tailing relay's settled position, kept in a table. PostgreSQL (before 17) writes a
-- logical slot's confirmed position to disk only when the slot's other fields move (about every
-- 15 s of WAL activity) or at a checkpoint that finds the slot changed: after a server restart
-- the slot could start that far back, and a relay would publish those events again, later than
-- a consumer's dedup window may reach. The relay writes here the end of the last transaction
-- whose events it settled (one row per slot, moved forward only) and starts its stream from
-- there; the server skips the transactions that committed before it.
-- Applied by outbox::postgresql::migrate after 0005.
CREATE TABLE outbox_tail_positions (
  slot       text        PRIMARY KEY,
  settled    bigint      NOT NULL,  -- an LSN: every event committed before it is settled
  updated_at timestamptz NOT NULL DEFAULT now()
);
