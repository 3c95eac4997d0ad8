-- bothy:no-transaction
-- The index of per-delivery claims (claim_job_id, claim_owner, claim_until) of the former unordered sender. One
-- sender per subscription, holding the subscription's lease, now sends for every policy, and nothing reads or
-- writes those columns; they stay until a later release may drop them, so that an older binary still running
-- during a rolling upgrade finds them.
DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_claimed;
