-- 0058 sessions of the web console (docs/adr/0065-web-console.md).
--
-- A browser signs in to the console with a bearer token (or opens a portal link an API caller issued) and gets
-- a cookie holding a random session id. Only the SHA-256 of that id is stored, so a copy of this table does not
-- let anyone act as a session.
--
-- token_id is the token the session rests on: the one signed in with, or the one that issued the portal link.
-- Every console request re-reads it with the principal, so revoking the token, its expiry or disabling the
-- principal ends the session at the next request; the cascades remove sessions of deleted tokens and principals.
-- principal is whose view the session shows (for a portal link, the principal the link names, who may differ
-- from the token's owner). portal_space is NULL for a signed-in session; for a portal session it is the one space
-- the session is restricted to, and the console shows only principal's own subscriptions there.
-- csrf_secret keys the CSRF tokens of the session's forms.
CREATE TABLE console_sessions (
    id_hash      bytea       PRIMARY KEY CHECK (length(id_hash) = 32),
    token_id     uuid        NOT NULL REFERENCES tokens (id) ON DELETE CASCADE,
    principal    text        NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    portal_space text,
    csrf_secret  bytea       NOT NULL CHECK (length(csrf_secret) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
-- Expired sessions are deleted whenever a new one is created.
CREATE INDEX console_sessions_expires_at ON console_sessions (expires_at);
CREATE INDEX console_sessions_token_id ON console_sessions (token_id);
CREATE INDEX console_sessions_principal ON console_sessions (principal);
