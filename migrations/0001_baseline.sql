-- 0001 baseline: the schema as bothy's development migrations left it, folded into one file before the first
-- release.
--
-- From here on a landed migration is never edited: every change is a new file (0002_..., applied after this one)
-- that follows the expand/contract rules of ops/upgrades.md (the reasons are in the ADR "Schema changes and
-- upgrades" in docs/adr/), and the migrator refuses a database whose applied files differ from the binary's.
--
-- Tables, by area:
--
--   event log (docs/adr/0009-event-log.md)
--     event_seq                   the one counter row that orders commits and hands out gapless seqs
--     event_log                   the commit-ordered log every consumer reads, partitioned by commit time
--     event_log_retention         what retention removed: every seq below low_seq is gone
--     event_log_partitions        the bounds of every partition the maintenance job created
--     event_ids                   each event id once, so a retried append is not logged twice
--   consumers (docs/adr/0010-consumers-with-cursor.md)
--     event_consumer_cursors      one cursor row per consumer; its rows are the allowed consumer names
--   authorization (docs/adr/0016-outgoing-webhooks.md)
--     principals                  users and apps
--     space_members               a principal's right on a space
--     tokens                      bearer tokens (hash only) with scopes that narrow their principal's rights
--   outgoing webhooks (docs/adr/0016-outgoing-webhooks.md)
--     webhook_subscriptions       one target URL of an owner on one space, with its policy and sender claim
--     webhook_subscription_filters the event-type filters as rows, so rounds match by lookup
--     webhook_deliveries          one row per (subscription, event)
--     webhook_attempts            every request sent, for the owner to inspect
--   push (docs/adr/0031-push-notifications.md)
--     push_registrations          one device of a principal as a Web Push subscription
--     push_preferences            a principal's mute per space (only the exceptions are rows)
--     push_sends                  each message a push service accepted, so a rerun job sends nothing
--   web console (docs/adr/0065-web-console.md)
--     console_sessions            browser sessions, stored as the hash of their id
--     console_portal_links_used   hashes of portal links already opened, so each opens once
--
-- River's own tables come from rivermigrate, which runs before this file; the last statements here only tune
-- two of River's indexes.

-- ---------------------------------------------------------------------------------------------------------------
-- Event log
-- ---------------------------------------------------------------------------------------------------------------

-- event_seq is a single counter row. A producer takes it as the last step before COMMIT, so the row lock (and
-- the advisory lock queued in front of it) orders commits and hands out seq values without gaps: a rolled-back
-- transaction gives its number back, unlike a sequence. The row is tiny, its updated column is not indexed and
-- the fillfactor is low, so every update stays a HOT update and the page does not bloat.
CREATE TABLE event_seq (
    id       boolean PRIMARY KEY DEFAULT true CHECK (id),
    last_seq bigint  NOT NULL DEFAULT 0
) WITH (fillfactor = 10);
INSERT INTO event_seq (id, last_seq) VALUES (true, 0);

-- event_log is partitioned by commit time so retention can drop whole partitions instead of deleting rows.
-- committed_at is taken under the counter lock, so it grows with seq and each partition holds a contiguous seq
-- range. The primary key must contain the partition key; seq leads it, so "seq > $1 ORDER BY seq LIMIT n" is an
-- index range scan per partition. Partitions are created by the application (CREATE TABLE ... LIKE event_log
-- INCLUDING ALL, then ATTACH), never here.
--
-- traceparent is the W3C trace context of the producer's span that committed the event, or NULL when the
-- producer was not traced; rounds and webhook deliveries carry it on, so one trace runs from the API request to
-- every delivery attempt (docs/adr/0063-observability.md). Its CHECK is declared NOT VALID, the form that adds
-- it to a populated log without scanning it; on this empty table that changes nothing: every row written is
-- checked, and partitions created later carry a validated copy.
CREATE TABLE event_log (
    seq          bigint      NOT NULL,
    committed_at timestamptz NOT NULL,
    id           uuid        NOT NULL,
    space        text        NOT NULL,
    type         text        NOT NULL,
    actor        text        NOT NULL,
    occurred_at  timestamptz NOT NULL,
    data         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    traceparent  text,
    PRIMARY KEY (seq, committed_at)
) PARTITION BY RANGE (committed_at);
ALTER TABLE event_log ADD CONSTRAINT event_log_traceparent_check
    CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;

-- event_log_retention records what retention removed: every seq below low_seq is gone for good. Consumers
-- compare their cursor with it to report the exact range they lost (sync.ConsumerLossHandler).
CREATE TABLE event_log_retention (
    id              boolean     PRIMARY KEY DEFAULT true CHECK (id),
    low_seq         bigint      NOT NULL DEFAULT 1,
    last_dropped_at timestamptz
);
INSERT INTO event_log_retention (id, low_seq) VALUES (true, 1);

-- event_log_partitions keeps the bounds of every partition the maintenance job created, so it never has to parse
-- pg_catalog's bound expressions.
CREATE TABLE event_log_partitions (
    name       text        PRIMARY KEY,
    from_time  timestamptz NOT NULL,
    to_time    timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- event_ids: an event id is appended to the log once. Clients and producers retry with the same ids, and
-- receivers deduplicate by it (it is the webhook-id), so a second copy in the log would be dropped by some of them
-- and processed twice by others. event_log cannot hold a unique index on id: a unique index of a partitioned table
-- must contain the partition key. This table is that index, outside the log.
--
-- A producer inserts its events' ids here before it takes the counter (INSERT ... ON CONFLICT DO NOTHING) and
-- appends only those that were not there; a concurrent producer with the same id waits on the index entry outside
-- the counter's window. seq is not known yet at that moment, so after_seq records the log's head: the event is the
-- first with this id after after_seq, which a repeated id finds by a short range scan of event_log's primary key.
-- Retention deletes, before dropping a partition, every id whose after_seq is below the partition's highest seq.
CREATE TABLE event_ids (
    id        uuid   PRIMARY KEY,
    after_seq bigint NOT NULL
);

-- ---------------------------------------------------------------------------------------------------------------
-- Consumers
-- ---------------------------------------------------------------------------------------------------------------

-- One row per consumer name. A round locks its row FOR UPDATE SKIP LOCKED, so one worker at a time processes a
-- consumer and a second one ends its round at once. The set of rows is the set of allowed consumer names.
-- last_round_at is written by every successful round, so "stuck" can be told from "slow" from the database alone.
-- The columns updated by rounds carry no index and the fillfactor is low, so the updates stay HOT.
CREATE TABLE event_consumer_cursors (
    name          text        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    last_seq      bigint      NOT NULL CHECK (last_seq >= 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_round_at timestamptz
) WITH (fillfactor = 20);

-- The webhooks and push consumers start at the head of the (empty) log. A later consumer is one additive
-- migration that inserts its row at the head at the moment it runs (SELECT 'name', last_seq FROM event_seq):
-- events committed before it existed had no receivers of its kind, and replaying the retained history would
-- flood them.
INSERT INTO event_consumer_cursors (name, last_seq) VALUES ('webhooks', 0), ('push', 0);

-- ---------------------------------------------------------------------------------------------------------------
-- Authorization
-- ---------------------------------------------------------------------------------------------------------------

-- Principals are users and apps. A principal's right on a space is one row of space_members; the enum's
-- declaration order is the hierarchy, so "right >= 'read'" means read, write or admin. Tokens carry scopes that
-- narrow what their principal's rights allow; only a SHA-256 of the secret is stored (secrets are 256 random
-- bits, so a slow hash adds nothing). Delivery jobs read these tables at every decision, so a revocation takes
-- effect on the next delivery.
CREATE TYPE space_right AS ENUM ('read', 'write', 'admin');

CREATE TABLE principals (
    id          text        PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'),
    kind        text        NOT NULL CHECK (kind IN ('user', 'app')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz
);

CREATE TABLE space_members (
    space      text        NOT NULL,
    principal  text        NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    "right"    space_right NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (space, principal)
);
CREATE INDEX space_members_principal ON space_members (principal);

CREATE TABLE tokens (
    id           uuid        PRIMARY KEY,
    principal    text        NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    secret_hash  bytea       NOT NULL CHECK (length(secret_hash) = 32),
    scopes       text[]      NOT NULL,
    name         text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz
);
CREATE INDEX tokens_principal ON tokens (principal);

-- ---------------------------------------------------------------------------------------------------------------
-- Outgoing webhooks
-- ---------------------------------------------------------------------------------------------------------------

-- webhook_subscriptions: one target URL of an owner on one space.
--
-- secret is kept in its whsec_ form because HMAC needs the key itself; it is never logged and never exported.
-- headers are the owner's own request headers, sent with every delivery; receivers often authenticate with them,
-- so they are secrets too: never shown whole, never logged. Names are stored canonical.
--
-- resume_after_seq is the head at creation (and at every enable): older events are not delivered.
-- backlog_from_seq is where a disabled subscription's backlog starts, for `enable --from backlog`: rounds make no
-- delivery rows for a disabled subscription, so the round that first finds it disabled stores the lowest seq of
-- its batch here, in the statement that makes the other subscriptions' rows; enabling clears it.
--
-- The sender claim: pump_job_id/pump_until say which River job currently sends for the subscription and until
-- when; one sender per subscription keeps deliveries in seq order without holding a transaction or a connection
-- during the HTTP call. pump_owner is the River client ID of the process that wrote the claim: while it lives it
-- holds a session advisory lock keyed by that ID (package liveness), so a job of another process that finds the
-- lock free takes the claim at once instead of waiting for pump_until. NULL: the claim holds until pump_until.
--
-- policy: ordered (head-of-line; a head whose retry budget is spent disables the subscription as failing),
-- ordered_dead_letter (that head becomes dead and the next is sent) or unordered (up to max_in_flight sends at
-- once, NULL for the ordered policies). auto_recover keeps a failing ordered subscription's head pending and
-- probes with it while probing is true; any change of status or cause ends probing (the trigger below).
-- max_requests_per_second and retry_*_ms: NULL is the server's configuration. throttle_next_at is when the next
-- request may start, written with the sender's claim in the same statement. keeper_wake_at is when the job that
-- comes back for an unordered subscription's retries wakes. max_batch (ordered only): up to this many consecutive
-- pending events go out in one request; NULL sends one event per request.
--
-- failing_since is set by the first failed attempt after a success and cleared by the next success, so the
-- operational events bothy.webhook.failing and bothy.webhook.recovered fire once per change.
--
-- The senders update the claim columns constantly: no index covers them and the fillfactor is 50, so those
-- updates stay HOT.
CREATE TABLE webhook_subscriptions (
    id                      uuid        PRIMARY KEY,
    owner                   text        NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    space                   text        NOT NULL,
    url                     text        NOT NULL,
    secret                  text        NOT NULL CHECK (secret LIKE 'whsec\_%'),
    previous_secret         text,
    previous_secret_until   timestamptz,
    event_types             text[]      NOT NULL DEFAULT '{}',
    token_id                uuid        REFERENCES tokens (id) ON DELETE SET NULL,
    status                  text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    disabled_cause          text        CHECK (disabled_cause IN ('gap', 'failing', 'gone', 'manual')),
    disabled_detail         text,
    disabled_at             timestamptz,
    resume_after_seq        bigint      NOT NULL DEFAULT 0,
    last_delivered_seq      bigint      NOT NULL DEFAULT 0,
    pump_job_id             bigint,
    pump_until              timestamptz,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    pump_owner              text,
    policy                  text        NOT NULL DEFAULT 'ordered' CHECK (policy IN ('ordered', 'ordered_dead_letter', 'unordered')),
    max_in_flight           integer     CHECK (max_in_flight BETWEEN 1 AND 100),
    auto_recover            boolean     NOT NULL DEFAULT false,
    probing                 boolean     NOT NULL DEFAULT false,
    max_requests_per_second double precision CHECK (max_requests_per_second > 0),
    retry_base_ms           bigint      CHECK (retry_base_ms > 0),
    retry_max_ms            bigint      CHECK (retry_max_ms > 0),
    retry_budget_ms         bigint      CHECK (retry_budget_ms > 0),
    throttle_next_at        timestamptz,
    keeper_wake_at          timestamptz,
    backlog_from_seq        bigint,
    headers                 jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
    failing_since           timestamptz,
    max_batch               integer     CHECK (max_batch BETWEEN 1 AND 1000),
    CHECK ((status = 'disabled') = (disabled_cause IS NOT NULL)),
    CONSTRAINT webhook_subscriptions_in_flight_unordered CHECK ((policy = 'unordered') = (max_in_flight IS NOT NULL)),
    CONSTRAINT webhook_subscriptions_probing_failing CHECK (NOT probing OR (status = 'disabled' AND disabled_cause = 'failing')),
    CONSTRAINT webhook_subscriptions_batch_ordered CHECK (max_batch IS NULL OR policy <> 'unordered')
) WITH (fillfactor = 50);
CREATE INDEX webhook_subscriptions_owner ON webhook_subscriptions (owner);
-- The per-space limit counts a space's subscriptions of every status (a disabled one can be enabled again).
CREATE INDEX webhook_subscriptions_space ON webhook_subscriptions (space);
-- The round finds the disabled subscriptions whose backlog start is not yet marked here. The index holds only
-- those, so it is empty between a disable and the next round; the senders' updates touch neither column.
CREATE INDEX webhook_subscriptions_unmarked ON webhook_subscriptions (id)
    WHERE status = 'disabled' AND backlog_from_seq IS NULL;

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

-- webhook_subscription_filters holds one row per distinct (subscription, pattern), with the subscription's space;
-- an empty filter (every type) is the pattern '*'. The round derives each event's candidate patterns from its type
-- alone (for a.b.c: a.b.c, a.b.*, a.* and *) and looks them up by (space, pattern), so its cost does not depend on
-- how many filters anyone has: one tenant with thousands of filters cannot stall everyone's rounds. The trigger
-- keeps the rows equal to event_types whoever writes the subscription (the store, an operator's SQL, a restore),
-- so event_types stays the one written source.
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

-- webhook_deliveries: one row per (subscription, event), created by the round of the webhooks consumer. The
-- primary key makes a replayed round harmless. claim_job_id, claim_owner and claim_until are the one sender of a
-- delivery of an unordered subscription, claimed like the subscription's pump claim but per delivery, and cleared
-- when its outcome is recorded.
CREATE TABLE webhook_deliveries (
    subscription_id  uuid        NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    event_seq        bigint      NOT NULL,
    event_id         uuid        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead', 'skipped')),
    attempts         integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    first_attempt_at timestamptz,
    next_attempt_at  timestamptz,
    finished_at      timestamptz,
    last_error       text,
    claim_job_id     bigint,
    claim_owner      text,
    claim_until      timestamptz,
    PRIMARY KEY (subscription_id, event_seq)
);
-- A subscription's head (its lowest pending delivery) and the oldest pending delivery.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (subscription_id, event_seq) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_pending_created ON webhook_deliveries (created_at) WHERE status = 'pending';
-- Only claimed pending rows (an unordered subscription's sends in flight and queued), which an ordered sender
-- checks before it sends after a change of policy.
CREATE INDEX webhook_deliveries_claimed ON webhook_deliveries (subscription_id) WHERE status = 'pending' AND claim_until IS NOT NULL;
-- Pending deliveries by when they are due (a retry's next attempt, otherwise creation), so an unordered sender
-- finds the next due one without walking the deliveries that wait for a retry.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (subscription_id, (coalesce(next_attempt_at, created_at)), event_seq)
    WHERE status = 'pending';

-- webhook_attempts: every request sent (and every delivery refused before sending, with status_code NULL), for
-- the owner to inspect.
CREATE TABLE webhook_attempts (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id  uuid        NOT NULL,
    event_seq        bigint      NOT NULL,
    attempted_at     timestamptz NOT NULL DEFAULT now(),
    status_code      integer,
    duration_seconds double precision NOT NULL DEFAULT 0,
    error            text,
    response_excerpt text,
    FOREIGN KEY (subscription_id, event_seq) REFERENCES webhook_deliveries (subscription_id, event_seq) ON DELETE CASCADE
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (subscription_id, event_seq);

-- ---------------------------------------------------------------------------------------------------------------
-- Push
-- ---------------------------------------------------------------------------------------------------------------

-- A registration is one device of a principal as a standard Web Push subscription: the push service's endpoint
-- URL and the browser's keys (p256dh: the device's P-256 public key, auth: its 16-byte secret), both unpadded
-- base64url, validated by the application. An endpoint is unique: a browser that subscribes again, or a device
-- that changes hands, replaces the row instead of receiving twice. Deliveries delete the row when the push
-- service answers 404 or 410. The principal is not a foreign key: rights, not registrations, decide who receives,
-- and a registration outliving its principal receives nothing.
CREATE TABLE push_registrations (
    id         uuid        PRIMARY KEY,
    principal  text        NOT NULL,
    endpoint   text        NOT NULL UNIQUE CHECK (length(endpoint) <= 2048),
    p256dh     text        NOT NULL,
    auth       text        NOT NULL,
    user_agent text        NOT NULL DEFAULT '',
    -- token_id is the token the device was registered through, if any: deliveries then check that token's
    -- current scopes, so revoking the token silences the device. NULL: a first-party session, checked with the
    -- principal's own rights.
    token_id   uuid        REFERENCES tokens (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX push_registrations_principal ON push_registrations (principal);

-- push_preferences holds a principal's choice per space. No row means notify: a member who registered a device
-- wants to hear about the spaces they can read until they mute one. Only the exceptions are rows, so the table
-- stays small and the consumer's join cheap.
CREATE TABLE push_preferences (
    principal  text        NOT NULL,
    space      text        NOT NULL,
    notify     boolean     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal, space)
);

-- push_sends records each message a push service accepted, written right after its answer. A push.deliver job
-- that runs again (its completion was lost, or a dead process's job was made available again) finds the row and
-- sends nothing. status is the push service's HTTP status. The worker deletes rows once no job for them can still
-- run; sent_at grows with insertion order, so a BRIN index finds them at almost no cost to inserts.
CREATE TABLE push_sends (
    registration_id uuid        NOT NULL REFERENCES push_registrations (id) ON DELETE CASCADE,
    event_seq       bigint      NOT NULL,
    event_id        uuid        NOT NULL,
    status          smallint    NOT NULL,
    sent_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (registration_id, event_seq)
);
CREATE INDEX push_sends_sent_at ON push_sends USING brin (sent_at);

-- ---------------------------------------------------------------------------------------------------------------
-- Web console
-- ---------------------------------------------------------------------------------------------------------------

-- A browser signs in with a bearer token (or opens a portal link) and gets a cookie holding a random session id;
-- only its SHA-256 is stored, so a copy of this table does not let anyone act as a session. token_id is the token
-- the session rests on: every console request re-reads it with the principal, so revoking the token, its expiry
-- or disabling the principal ends the session at the next request. principal is whose view the session shows;
-- portal_space is NULL for a signed-in session and the one space a portal session is restricted to. csrf_secret
-- keys the CSRF tokens of the session's forms. Expired sessions are deleted whenever a new one is created.
CREATE TABLE console_sessions (
    id_hash      bytea       PRIMARY KEY CHECK (length(id_hash) = 32),
    token_id     uuid        NOT NULL REFERENCES tokens (id) ON DELETE CASCADE,
    principal    text        NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    portal_space text,
    csrf_secret  bytea       NOT NULL CHECK (length(csrf_secret) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX console_sessions_expires_at ON console_sessions (expires_at);
CREATE INDEX console_sessions_token_id ON console_sessions (token_id);
CREATE INDEX console_sessions_principal ON console_sessions (principal);

-- Each portal link opens one session: the console records the SHA-256 of every link it has exchanged and refuses
-- a link whose hash is here. expires_at is the link's own expiry, after which its signature check refuses it
-- anyway, so older rows are deleted whenever a link is used.
CREATE TABLE console_portal_links_used (
    link_hash  bytea       PRIMARY KEY CHECK (length(link_hash) = 32),
    expires_at timestamptz NOT NULL
);
CREATE INDEX console_portal_links_used_expires_at ON console_portal_links_used (expires_at);

-- ---------------------------------------------------------------------------------------------------------------
-- River's job table
-- ---------------------------------------------------------------------------------------------------------------

-- The pending lists of River's two GIN indexes on river_job (args, metadata) are bounded to 64 kB, PostgreSQL's
-- minimum, instead of the default 4 MB. Every job passes through three row versions, each adding entries to both
-- indexes; with a large pending list the statement that overflows it (a round's COPY, River's fetch) merges it
-- into the index and stalls. Small lists are merged often and quickly (docs/adr/0031-push-notifications.md). A
-- reindex (River's reindexer) keeps these storage parameters.
ALTER INDEX river_job_args_index SET (gin_pending_list_limit = 64);
ALTER INDEX river_job_metadata_index SET (gin_pending_list_limit = 64);
