-- 0059 portal links of the web console are single-use (docs/adr/0065-web-console.md).
--
-- A portal link (POST /v1/portal-links) is a signed, expiring URL; opening it starts a portal session. Each link
-- opens one session: the console records the SHA-256 of every link it has exchanged, and refuses a link whose
-- hash is here. Only the hash is kept, so this table holds no usable link. expires_at is the link's own expiry:
-- after it the signature check refuses the link anyway, so rows past it are deleted whenever a link is used.
CREATE TABLE console_portal_links_used (
    link_hash  bytea       PRIMARY KEY CHECK (length(link_hash) = 32),
    expires_at timestamptz NOT NULL
);
CREATE INDEX console_portal_links_used_expires_at ON console_portal_links_used (expires_at);
