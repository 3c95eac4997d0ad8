-- 0030 push registrations and notification preferences (ADR 0031).
--
-- A registration is one device of a principal as a standard Web Push
-- subscription: the push service's endpoint URL and the browser's keys
-- (p256dh: the device's P-256 public key, auth: its 16-byte secret), both
-- stored as unpadded base64url, validated by the application before insert.
-- An endpoint is unique: a browser that subscribes again, or a device that
-- changes hands, replaces the row instead of receiving twice. The push
-- consumer reads registrations by principal; deliveries delete the row when
-- the push service answers 404 or 410 (the subscription is gone). The
-- principal is not a foreign key: rights, not registrations, decide who
-- receives, and a registration outliving its principal receives nothing.
CREATE TABLE push_registrations (
    id         uuid        PRIMARY KEY,
    principal  text        NOT NULL,
    endpoint   text        NOT NULL UNIQUE CHECK (length(endpoint) <= 2048),
    p256dh     text        NOT NULL,
    auth       text        NOT NULL,
    user_agent text        NOT NULL DEFAULT '',
    -- token_id is the token the device was registered through, if any:
    -- deliveries then check that token's current scopes, so revoking the
    -- token silences the device. NULL: a first-party session, checked
    -- with the principal's own rights.
    token_id   uuid        REFERENCES tokens (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX push_registrations_principal ON push_registrations (principal);

-- push_preferences holds a principal's choice per space. No row means the
-- default, notify: a member who registered a device wants to hear about the
-- spaces they can read until they mute one. Only the exceptions are rows, so
-- the table stays small and the consumer's join cheap.
CREATE TABLE push_preferences (
    principal  text        NOT NULL,
    space      text        NOT NULL,
    notify     boolean     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal, space)
);
