-- When a delivery was last made pending again by a resend. A resend keeps the delivery's created_at (the time
-- its event was matched, which the API's time filters and the console show) and makes it due at once by its
-- next_attempt_at; resent_at records that it was resent, and the pending-age gauge counts a resent delivery from
-- it. Nullable without a default, so adding it rewrites nothing and the release before it keeps writing
-- deliveries.
ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS resent_at timestamptz;
