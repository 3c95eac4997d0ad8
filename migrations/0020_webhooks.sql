-- 0020 outgoing webhooks (docs/adr/0016-outgoing-webhooks.md).
--
-- webhook_subscriptions: one target URL of an owner on one space. The
-- signing secret is kept in its whsec_ form because HMAC needs the key
-- itself; it is never logged and never exported. resume_after_seq is the
-- head at creation (and at every enable): older events are not delivered.
-- pump_job_id/pump_until say which River job currently sends for the
-- subscription and until when that claim holds: one sender per
-- subscription keeps deliveries in seq order without holding a transaction
-- or a connection during the HTTP call.
CREATE TABLE webhook_subscriptions (
    id                     uuid        PRIMARY KEY,
    owner                  text        NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    space                  text        NOT NULL,
    url                    text        NOT NULL,
    secret                 text        NOT NULL CHECK (secret LIKE 'whsec\_%'),
    previous_secret        text,
    previous_secret_until  timestamptz,
    event_types            text[]      NOT NULL DEFAULT '{}',
    token_id               uuid        REFERENCES tokens (id) ON DELETE SET NULL,
    status                 text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    disabled_cause         text        CHECK (disabled_cause IN ('gap', 'failing', 'gone', 'manual')),
    disabled_detail        text,
    disabled_at            timestamptz,
    resume_after_seq       bigint      NOT NULL DEFAULT 0,
    last_delivered_seq     bigint      NOT NULL DEFAULT 0,
    pump_job_id            bigint,
    pump_until             timestamptz,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    CHECK ((status = 'disabled') = (disabled_cause IS NOT NULL))
) WITH (fillfactor = 50);
-- The consumer's round joins its batch on space among active subscriptions.
CREATE INDEX webhook_subscriptions_active_space ON webhook_subscriptions (space) WHERE status = 'active';
CREATE INDEX webhook_subscriptions_owner ON webhook_subscriptions (owner);

-- webhook_deliveries: one row per (subscription, event), created by the
-- round of the webhooks consumer. The primary key is the unique key that
-- makes a replayed round harmless. The partial index finds a subscription's
-- head (lowest pending delivery) and the oldest pending one.
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
    PRIMARY KEY (subscription_id, event_seq)
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (subscription_id, event_seq) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_pending_created ON webhook_deliveries (created_at) WHERE status = 'pending';

-- webhook_attempts: every request sent (and every delivery refused before
-- sending, with status_code NULL), for the owner to inspect.
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
