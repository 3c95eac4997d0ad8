-- 0053 failure policies, throttling and retry schedules per webhook subscription
-- (docs/adr/0016-outgoing-webhooks.md).
--
-- Why: one order and one retry schedule for every receiver made a receiver that dedupes by webhook-id as slow
-- as one request at a time allows, and made one bad event stop a whole subscription after its budget. Owners
-- now choose per subscription:
--
-- policy: ordered (the default and what every subscription did before: head-of-line, and a head whose retry
-- budget is spent disables the subscription as failing); ordered_dead_letter (that head becomes dead, stays
-- listed, and the next one is sent); unordered (up to max_in_flight sends at once, 1..100, NULL for the
-- ordered policies; each delivery retried on its own schedule, dead after its own budget).
--
-- auto_recover: a subscription the ordered policy disables as failing keeps its head pending and is probed
-- with it at a growing interval; probing is true while that goes on (the round keeps recording deliveries for
-- it, so a successful probe resumes with the whole backlog and no gap). Default off: disabled is final until
-- an enable, as before. Any change of status or cause ends probing (the trigger below), whoever makes it: an
-- enable, a manual disable, a gap, a 410.
--
-- max_requests_per_second, retry_base_ms, retry_max_ms, retry_budget_ms: NULL is the server's configuration
-- (webhooks.retry_budget and the delivery worker's defaults), so existing rows keep following it.
-- throttle_next_at is when the subscription's next request may start; it is written with the sender's claim in
-- the same statement on the subscription row (fillfactor 50), and no index covers it.
--
-- keeper_wake_at: when the job that comes back for an unordered subscription's retries wakes. That job snoozes
-- without holding the pump claim, so the jobs of new deliveries send them at once; a pump that ends with retries
-- not yet due snoozes too only if no keeper wakes before them.
--
-- webhook_deliveries.claim_job_id, claim_owner, claim_until: the one sender of a delivery of an unordered
-- subscription, claimed like the subscription's pump claim (migration 0051) but per delivery, and cleared when
-- its outcome is recorded. The partial index holds only claimed pending rows (a subscription's sends in flight
-- and queued), which an ordered sender checks before it sends after a change of policy. webhook_deliveries_due orders pending deliveries by when
-- they are due (a retry's next attempt, otherwise creation), so an unordered sender finds the next due one
-- without walking the deliveries that wait for a retry. Columns are nullable without defaults and the checks
-- hold for every existing row, so nothing is rewritten.
ALTER TABLE webhook_subscriptions
    ADD COLUMN policy text NOT NULL DEFAULT 'ordered' CHECK (policy IN ('ordered', 'ordered_dead_letter', 'unordered')),
    ADD COLUMN max_in_flight integer CHECK (max_in_flight BETWEEN 1 AND 100),
    ADD COLUMN auto_recover boolean NOT NULL DEFAULT false,
    ADD COLUMN probing boolean NOT NULL DEFAULT false,
    ADD COLUMN max_requests_per_second double precision CHECK (max_requests_per_second > 0),
    ADD COLUMN retry_base_ms bigint CHECK (retry_base_ms > 0),
    ADD COLUMN retry_max_ms bigint CHECK (retry_max_ms > 0),
    ADD COLUMN retry_budget_ms bigint CHECK (retry_budget_ms > 0),
    ADD COLUMN throttle_next_at timestamptz,
    ADD COLUMN keeper_wake_at timestamptz,
    ADD CONSTRAINT webhook_subscriptions_in_flight_unordered CHECK ((policy = 'unordered') = (max_in_flight IS NOT NULL)),
    ADD CONSTRAINT webhook_subscriptions_probing_failing CHECK (NOT probing OR (status = 'disabled' AND disabled_cause = 'failing'));

ALTER TABLE webhook_deliveries
    ADD COLUMN claim_job_id bigint,
    ADD COLUMN claim_owner text,
    ADD COLUMN claim_until timestamptz;
CREATE INDEX webhook_deliveries_claimed ON webhook_deliveries (subscription_id) WHERE status = 'pending' AND claim_until IS NOT NULL;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (subscription_id, (coalesce(next_attempt_at, created_at)), event_seq)
    WHERE status = 'pending';

CREATE FUNCTION webhook_subscriptions_end_probing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status <> 'disabled' OR NEW.disabled_cause IS DISTINCT FROM 'failing' THEN
        NEW.probing := false;
    END IF;
    RETURN NEW;
END $$;

-- Only statements that set status or cause on a probing row run it; the senders' claim updates do not.
CREATE TRIGGER webhook_subscriptions_end_probing BEFORE UPDATE OF status, disabled_cause ON webhook_subscriptions
    FOR EACH ROW WHEN (NEW.probing) EXECUTE FUNCTION webhook_subscriptions_end_probing();
