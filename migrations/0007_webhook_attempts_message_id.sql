-- The webhook-id an attempt's request was signed under, when it is not the event's own id: a batch's id
-- (batch_…), which the API and the console show instead of the event's id, as the receiver got it. NULL for a
-- request of the event alone, whose id is the event's (so the usual attempt stores nothing more), and for
-- attempts recorded before this column; '' for a delivery refused without a request. Nullable without a
-- default, so adding it rewrites nothing and the release before it keeps inserting attempts.
ALTER TABLE webhook_attempts ADD COLUMN IF NOT EXISTS message_id text;
