-- The table-free writer's event: a transactional logical decoding message of the caller's
-- transaction (in the WAL at its commit, gone with a rollback), prefix 'outbox', read by the
-- log-tailing relay. For several events the store sends one statement that selects this from a
-- VALUES list of them, in order.
-- $1 the event (bytea, sent in binary: outbox::postgresql::detail::wal::encode_event).
SELECT pg_catalog.pg_logical_emit_message(true, 'outbox', $1::bytea)
