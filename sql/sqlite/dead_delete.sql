-- Discard, its second step (dead_archive.sql): removes from the outbox the dead letters just
-- archived.
-- ?1 the archive time (Unix ms) dead_archive.sql stamped.
DELETE FROM outbox
WHERE state = 2 AND seq IN (SELECT seq FROM outbox_archive WHERE archived_at = ?1)
