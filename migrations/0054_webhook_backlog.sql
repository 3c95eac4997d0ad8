-- 0054 where a disabled webhook subscription's backlog starts (docs/adr/0016-outgoing-webhooks.md).
--
-- Why: `enable --from backlog` delivers the events a subscription missed while it was disabled. Rounds make no
-- delivery rows for a disabled subscription, and nothing recorded where they stopped making them: not the
-- disable time nor the log head at disable, since rounds lag behind commits and a round in flight may still
-- have made rows after it. So the round records it itself: a round that finds a disabled subscription not yet
-- marked stores the lowest seq of its batch in backlog_from_seq, in the statement that makes the other
-- subscriptions' rows (one snapshot: a subscription either got rows for the batch or is marked at its start).
-- Every matching event below the mark got a row while the subscription was active; enabling clears the mark.
ALTER TABLE webhook_subscriptions ADD COLUMN backlog_from_seq bigint;

-- The round's UPDATE finds the unmarked disabled subscriptions here. The index holds only those, so it is empty
-- between a disable and the next round; the senders' updates touch neither column and stay HOT.
CREATE INDEX webhook_subscriptions_unmarked ON webhook_subscriptions (id)
    WHERE status = 'disabled' AND backlog_from_seq IS NULL;

-- Subscriptions disabled before this migration: where rounds stopped is not known. Their backlog starts after
-- the last delivered (or starting) seq, so nothing retained is missed; rows that exist are kept as they are,
-- and an event whose finished row was pruned while it was still retained may be sent again (at least once).
UPDATE webhook_subscriptions SET backlog_from_seq = greatest(last_delivered_seq, resume_after_seq) + 1
WHERE status = 'disabled';
