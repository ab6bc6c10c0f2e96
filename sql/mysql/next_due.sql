-- When the next waiting row falls due (concepts::due_telling_store): the earliest available_at
-- after now of a pending row held by no claim (a scheduled event, a retry), Unix us, 0 when
-- none. A plain read (no lock), over the pending range of outbox_claim; run only by an idle
-- relay, before it sleeps.
-- :now (Unix us).
SELECT COALESCE(MIN(available_at), 0) FROM outbox FORCE INDEX (outbox_claim)
WHERE state = 0 AND lease_token IS NULL AND available_at > :now
