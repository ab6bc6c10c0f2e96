-- The writer's insert of one row; the store repeats the VALUES tuple for a multi-row insert
-- (at most 500 rows and 4 MiB as sent, values escaped, per statement, and never past the
-- session's max_allowed_packet: store.hpp, appender::append).
-- Placeholders, bound by position: event_id (UUID text), aggregate_type, aggregate_id,
-- event_type, payload (bytes: _binary, so the connection's character set never touches them),
-- headers (JSON object text), created_at (Unix us), content_type, available_at (Unix us; 0: at
-- once; later: a scheduled event, not claimable before it).
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers,
                    created_at, content_type, available_at)
VALUES (:event_id, :aggregate_type, :aggregate_id, :event_type, _binary :payload, :headers,
        :created_at, :content_type, :available_at)
