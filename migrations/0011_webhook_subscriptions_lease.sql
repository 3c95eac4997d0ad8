-- The sender's lease gets the names of what it is: lease_job_id, lease_owner and lease_until take the place of
-- pump_job_id, pump_owner and pump_until (what each means: the baseline's comment on the sender claim; the rules:
-- package webhooks/lease). A rename in expand and contract: this release reads and writes only lease_*, the
-- previous one only pump_*, and both run on this schema during a rolling upgrade and after a rollback. So while
-- both sets exist, the trigger below keeps them one lease: whichever set a statement changed is copied to the
-- other, before the row is written. A later release drops pump_* and the trigger (ops/upgrades.md, "Renaming the
-- sender's lease"), once no binary that writes pump_* runs.
--
-- Nullable columns without a default: adding them rewrites nothing. No index covers them, so the senders' constant
-- updates stay HOT. The backfill runs under the ALTER's lock, so no lease is written in between; the table has a
-- row per subscription.
SET LOCAL lock_timeout = '2s';

ALTER TABLE webhook_subscriptions
    ADD COLUMN IF NOT EXISTS lease_job_id bigint,
    ADD COLUMN IF NOT EXISTS lease_owner  text,
    ADD COLUMN IF NOT EXISTS lease_until  timestamptz;

UPDATE webhook_subscriptions SET lease_job_id = pump_job_id, lease_owner = pump_owner, lease_until = pump_until
WHERE pump_job_id IS NOT NULL OR pump_owner IS NOT NULL OR pump_until IS NOT NULL;

-- An update that left lease_* as they were came from the previous release (or touched neither set): pump_* is
-- copied to lease_*. Any other update, and an insert that sets lease_*, came from this release: lease_* is copied
-- to pump_*. The three columns are one lease, so they are copied together.
CREATE FUNCTION webhook_subscriptions_lease_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (TG_OP = 'UPDATE' AND (NEW.lease_job_id, NEW.lease_owner, NEW.lease_until)
                             IS NOT DISTINCT FROM (OLD.lease_job_id, OLD.lease_owner, OLD.lease_until))
       OR (TG_OP = 'INSERT' AND NEW.lease_job_id IS NULL AND NEW.lease_owner IS NULL AND NEW.lease_until IS NULL) THEN
        NEW.lease_job_id := NEW.pump_job_id;
        NEW.lease_owner := NEW.pump_owner;
        NEW.lease_until := NEW.pump_until;
    ELSE
        NEW.pump_job_id := NEW.lease_job_id;
        NEW.pump_owner := NEW.lease_owner;
        NEW.pump_until := NEW.lease_until;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER webhook_subscriptions_lease_sync
    BEFORE INSERT OR UPDATE OF pump_job_id, pump_owner, pump_until, lease_job_id, lease_owner, lease_until
    ON webhook_subscriptions FOR EACH ROW EXECUTE FUNCTION webhook_subscriptions_lease_sync();
