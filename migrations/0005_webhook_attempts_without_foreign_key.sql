-- Attempts no longer reference their delivery by a foreign key. The check cost every recorded attempt a lookup of
-- its delivery and a lock on that row, which PostgreSQL writes to the WAL: a tenth of what recording a batch of
-- deliveries costs the database. Attempts are only ever written for a delivery the writing transaction has just
-- read under its subscription's lock, and what the ON DELETE CASCADE did is now done where deliveries are deleted:
-- pruning deletes the attempts of the deliveries it deletes, and deleting a subscription deletes its attempts. An
-- older binary running during a rolling upgrade prunes or deletes without them; the attempts it leaves behind are
-- no one's and are pruned with the others.
ALTER TABLE webhook_attempts DROP CONSTRAINT IF EXISTS webhook_attempts_subscription_id_event_seq_fkey;
