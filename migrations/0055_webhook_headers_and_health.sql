-- 0055 custom request headers and delivery health of webhook subscriptions
-- (docs/adr/0016-outgoing-webhooks.md).
--
-- headers: the owner's own request headers ({"Authorization": "Bearer ..."}), sent with every delivery and test
-- send. Receivers often authenticate with them, so the values are secrets in the same sense as the signing
-- secret: stored as given (the request needs them), never shown whole by the API or the CLI, never logged.
-- Names are stored canonical (Authorization, X-Api-Key); the store refuses names the HTTP client or the
-- signature sets, hop-by-hop names and oversize sets before anything is written.
--
-- failing_since: set by the first failed attempt after a success (or since creation), cleared by the next
-- success. It is what makes the operational events bothy.webhook.failing and bothy.webhook.recovered fire once per
-- change instead of once per attempt. Attempts at operational events do not move it, so an operational event
-- can never cause another one.
--
-- Both columns are added with a constant default or none, so nothing is rewritten.
ALTER TABLE webhook_subscriptions
    ADD COLUMN headers jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
    ADD COLUMN failing_since timestamptz;
