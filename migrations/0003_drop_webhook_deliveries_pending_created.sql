-- bothy:no-transaction
-- Every pending delivery had an entry in this index, written by the round that made it, and no query reads it:
-- the senders find pending deliveries by subscription (webhook_deliveries_pending, webhook_deliveries_due).
-- Dropped concurrently, so deliveries keep being written while it goes.
DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_pending_created;
