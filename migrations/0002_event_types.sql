-- 0002 the event types each space has seen (docs/adr/0067-tenants-admin-api-and-event-pull.md).
--
-- GET /v1/spaces/{space}/event-types answers from this table, which the consumer event_types keeps: each round
-- adds its batch's count per (space, type), so the answer is one index range however large the log is, where
-- grouping the log itself would read every retained event of the space. Counts start when the consumer does:
-- like every new consumer it starts at the head of the log as this migration runs, so a deployment's first
-- round after the upgrade does not replay the retained log (and its pending-age alert does not fire for it).
-- A round updates the row of each type it saw; the key is never updated and the fillfactor leaves room on the
-- page, so the updates stay HOT.
CREATE TABLE event_types (
    space         text        NOT NULL,
    type          text        NOT NULL,
    count         bigint      NOT NULL CHECK (count > 0),
    first_seq     bigint      NOT NULL,
    last_seq      bigint      NOT NULL,
    first_seen_at timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL,
    PRIMARY KEY (space, type)
) WITH (fillfactor = 50);

INSERT INTO event_consumer_cursors (name, last_seq) SELECT 'event_types', last_seq FROM event_seq;
