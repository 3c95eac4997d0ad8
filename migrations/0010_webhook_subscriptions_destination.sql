-- Where a subscription's messages go. destination_kind 'http' is the url column, as before this migration; a broker
-- kind (rabbitmq, jetstream, redis, mqtt) keeps its fields in destination, checked by that kind's package when the
-- subscription is created or patched: the broker's URL with its credentials, and the exchange, subject, stream or
-- topic template. Like secret and headers, destination carries credentials: it is never returned, logged or
-- exported whole, only with its credentials masked. The kinds are listed so that a row names only one the server
-- knows. Constant defaults, so adding the columns rewrites nothing and the release before it keeps writing
-- subscriptions (as http ones).
ALTER TABLE webhook_subscriptions
    ADD COLUMN IF NOT EXISTS destination_kind text NOT NULL DEFAULT 'http'
        CONSTRAINT webhook_subscriptions_destination_kind CHECK (destination_kind IN ('http', 'rabbitmq', 'jetstream', 'redis', 'mqtt')),
    ADD COLUMN IF NOT EXISTS destination jsonb NOT NULL DEFAULT '{}'
        CONSTRAINT webhook_subscriptions_destination_object CHECK (jsonb_typeof(destination) = 'object');
