-- 0051 fast takeover of a dead process's work, and the record of push sends.
--
-- webhook_subscriptions.pump_owner is the River client ID of the process
-- whose job wrote the sender claim (pump_job_id, pump_until), when that
-- process takes part in liveness (package liveness): while it lives it holds
-- a session-level advisory lock keyed by that ID on a dedicated connection.
-- A job of another process that finds the claim unexpired but the owner's
-- lock free treats the claim as expired at once, instead of waiting for
-- pump_until. NULL (a claim written by a process that does not take part):
-- the claim holds until pump_until, as before. Nullable without a default,
-- so adding it rewrites nothing.
ALTER TABLE webhook_subscriptions ADD COLUMN pump_owner text;

-- push_sends records each message a push service accepted (a 2xx answer),
-- written right after the answer. A push.deliver job that runs again (River
-- retried it because its completion was lost, or the job of a dead process
-- was made available again) finds the row and sends nothing, so a device
-- gets a message at most once per (registration, event) outside the moment
-- between the 2xx and this insert. status is the push service's HTTP status.
-- The worker deletes rows once no job for them can still run (older than
-- push.ttl plus an hour); sent_at grows with insertion order, so a BRIN index
-- finds them at almost no cost to inserts. A removed registration takes its
-- rows with it.
CREATE TABLE push_sends (
    registration_id uuid        NOT NULL REFERENCES push_registrations (id) ON DELETE CASCADE,
    event_seq       bigint      NOT NULL,
    event_id        uuid        NOT NULL,
    status          smallint    NOT NULL,
    sent_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (registration_id, event_seq)
);
CREATE INDEX push_sends_sent_at ON push_sends USING brin (sent_at);
