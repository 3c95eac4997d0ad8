-- 0060 batched delivery to slow ordered receivers (docs/adr/0016-outgoing-webhooks.md).
--
-- max_batch: an owner's opt-in for an ordered subscription whose receiver is slow per request. Up to this many
-- consecutive pending events go out in one request, as a JSON array of envelopes under one signature, and are
-- acknowledged as a whole. NULL (the default, what every subscription did before) sends one event per request.
-- Added without a default, so nothing is rewritten.
ALTER TABLE webhook_subscriptions
    ADD COLUMN max_batch integer CHECK (max_batch BETWEEN 1 AND 1000),
    ADD CONSTRAINT webhook_subscriptions_batch_ordered CHECK (max_batch IS NULL OR policy <> 'unordered');
