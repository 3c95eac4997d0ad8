-- A subscription's CEL expressions over the event: filter chooses which matching events get a delivery, transform
-- shapes the body sent for each. NULL is none: the round matches such a subscription in SQL alone, as before, and
-- the sender sends the event's envelope. The store refuses an expression longer than 4,096 bytes; the CHECK keeps a
-- row written by hand within the same bound. Nullable without a default, so adding them rewrites nothing and the
-- release before this one keeps reading and writing subscriptions (it ignores both).
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS filter text CHECK (octet_length(filter) <= 4096);
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS transform text CHECK (octet_length(transform) <= 4096);
