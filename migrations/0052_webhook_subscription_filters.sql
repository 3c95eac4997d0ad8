-- 0052 webhook event-type filters as rows (docs/adr/0016-outgoing-webhooks.md).
--
-- Why: the webhooks round compared every event of its batch with every filter of every active subscription on
-- the event's space. One tenant with a few subscriptions of thousands of filters made every round time out,
-- the round rolled back and read the same batch again, and every other tenant's deliveries waited behind it for
-- good. Limits at create and update (webhooks.max_*) stop new oversize subscriptions; this table makes the
-- round's cost independent of how many filters anyone has, the old oversize rows included.
--
-- webhook_subscription_filters holds one row per distinct (subscription, pattern), with the subscription's
-- space. An empty filter (every type) is the pattern '*'. The round derives each event's candidate patterns
-- from its type alone (for a.b.c: a.b.c, a.b.*, a.* and *) and looks them up by (space, pattern): it reads the
-- filters that match and no other. The trigger keeps the rows equal to event_types whoever writes the
-- subscription (the store, an operator's SQL, a restore), so event_types stays the one written source.
CREATE TABLE webhook_subscription_filters (
    space           text NOT NULL,
    pattern         text NOT NULL,
    subscription_id uuid NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    PRIMARY KEY (space, pattern, subscription_id)
);
-- Replacing a subscription's filters and the cascade on delete find its rows by id.
CREATE INDEX webhook_subscription_filters_subscription ON webhook_subscription_filters (subscription_id);

CREATE FUNCTION webhook_subscription_filters_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM webhook_subscription_filters WHERE subscription_id = NEW.id;
    END IF;
    INSERT INTO webhook_subscription_filters (space, pattern, subscription_id)
    SELECT DISTINCT NEW.space, p, NEW.id
    FROM unnest(CASE WHEN cardinality(NEW.event_types) = 0 THEN ARRAY['*'] ELSE NEW.event_types END) AS p
    WHERE p IS NOT NULL;
    RETURN NULL;
END $$;

CREATE TRIGGER webhook_subscription_filters_insert AFTER INSERT ON webhook_subscriptions
    FOR EACH ROW EXECUTE FUNCTION webhook_subscription_filters_sync();
CREATE TRIGGER webhook_subscription_filters_update AFTER UPDATE OF event_types, space ON webhook_subscriptions
    FOR EACH ROW WHEN (OLD.event_types IS DISTINCT FROM NEW.event_types OR OLD.space IS DISTINCT FROM NEW.space)
    EXECUTE FUNCTION webhook_subscription_filters_sync();

INSERT INTO webhook_subscription_filters (space, pattern, subscription_id)
SELECT DISTINCT s.space, p, s.id
FROM webhook_subscriptions s,
     unnest(CASE WHEN cardinality(s.event_types) = 0 THEN ARRAY['*'] ELSE s.event_types END) AS p
WHERE p IS NOT NULL;

-- The per-space limit counts a space's subscriptions of every status (a disabled one can be enabled again).
-- The partial index by space served the round's old join and nothing else now.
CREATE INDEX webhook_subscriptions_space ON webhook_subscriptions (space);
DROP INDEX webhook_subscriptions_active_space;
