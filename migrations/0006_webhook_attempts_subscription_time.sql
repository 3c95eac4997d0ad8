-- bothy:no-transaction
-- A subscription's attempts by time, for its delivery statistics (GET /v1/webhooks/{id}/stats): the window's
-- attempts are read as one range of this index instead of every attempt the subscription ever had. It costs
-- every recorded attempt one more index entry. Built concurrently, so deliveries keep being recorded while it
-- is built.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_attempts_subscription_time ON webhook_attempts (subscription_id, attempted_at);
