-- 0010 authorization (internal/authz, D-AZ-1..): who may do what.
--
-- Principals are users and apps. A principal's right on a space is one row
-- of space_members; the enum's declaration order is the hierarchy, so
-- "right >= 'read'" means read, write or admin. Tokens carry scopes that
-- narrow what their principal's rights allow; only a SHA-256 of the secret
-- is stored (secrets are 256 random bits, so a slow hash adds nothing).
-- Delivery jobs read these tables at every call, so a revocation takes
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
    id          uuid        PRIMARY KEY,
    principal   text        NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    secret_hash bytea       NOT NULL CHECK (length(secret_hash) = 32),
    scopes      text[]      NOT NULL,
    name        text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    revoked_at  timestamptz,
    last_used_at timestamptz
);
CREATE INDEX tokens_principal ON tokens (principal);
