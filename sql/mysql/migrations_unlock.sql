-- The migration runner: releases its named lock.
SELECT RELEASE_LOCK('outbox_migrate')
