-- The log-tailing relay's publication, checked by setup and before each stream opens: table
-- mode's rows reach the relay only as INSERTs of the outbox table through that publication, and
-- pgoutput passes over the INSERTs of a table the publication does not carry without a word
-- (the slot then moves past them). $1 the publication's name. One row: the outbox table this
-- session resolves (its search_path; schema-qualified, NULL when there is none), its oid,
-- whether the publication exists, whether it publishes INSERTs, whether it carries that table
-- (FOR TABLE, FOR TABLES IN SCHEMA, FOR ALL TABLES: pg_publication_tables lists each), its row
-- filter there (NULL: none), and the columns the relay reads that its column list leaves out
-- (NULL: none). Through to_jsonb, a server without row filters and column lists (14) reads
-- those two as NULL rather than failing.
WITH t AS (
  SELECT c.oid, n.nspname, c.relname
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  WHERE c.oid = pg_catalog.to_regclass('outbox')),
p AS (SELECT pubinsert FROM pg_catalog.pg_publication WHERE pubname = $1),
pt AS (
  SELECT pg_catalog.to_jsonb(x) AS j
  FROM pg_catalog.pg_publication_tables x
  JOIN t ON x.schemaname = t.nspname AND x.tablename = t.relname
  WHERE x.pubname = $1)
SELECT (SELECT pg_catalog.format('%I.%I', nspname, relname) FROM t),
       coalesce((SELECT oid::bigint FROM t), 0),
       EXISTS (SELECT 1 FROM p),
       coalesce((SELECT pubinsert FROM p), false),
       EXISTS (SELECT 1 FROM pt),
       (SELECT j ->> 'rowfilter' FROM pt LIMIT 1),
       (SELECT pg_catalog.string_agg(col, ', ' ORDER BY col)
        FROM pt, unnest(ARRAY['event_id', 'aggregate_type', 'aggregate_id', 'event_type',
                              'payload_bytes', 'headers', 'created_at', 'content_type',
                              'state']) AS col
        WHERE pg_catalog.jsonb_typeof(j -> 'attnames') = 'array' AND NOT (j -> 'attnames') ? col)
