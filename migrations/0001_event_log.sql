-- 0001 event log (docs/adr/0009-event-log.md): the commit-ordered, gapless log every consumer reads.
--
-- event_seq is a single counter row. A producer takes it as the last step
-- before COMMIT, so the row lock (and the advisory lock queued in front of
-- it) orders commits and hands out seq values without gaps: a rolled-back
-- transaction gives its number back, unlike a sequence. The row is tiny,
-- its updated column is not indexed and the table has a low fillfactor so
-- every update stays a HOT update and the page does not bloat.
CREATE TABLE event_seq (
    id       boolean PRIMARY KEY DEFAULT true CHECK (id),
    last_seq bigint  NOT NULL DEFAULT 0
) WITH (fillfactor = 10);
INSERT INTO event_seq (id, last_seq) VALUES (true, 0);

-- event_log is partitioned by commit time so retention can detach whole
-- partitions instead of deleting rows. committed_at is taken under the
-- counter lock, so it grows with seq and each partition holds a contiguous
-- seq range. The primary key must contain the partition key; seq leads it,
-- so "seq > $1 ORDER BY seq LIMIT n" is an index range scan per partition.
CREATE TABLE event_log (
    seq          bigint      NOT NULL,
    committed_at timestamptz NOT NULL,
    id           uuid        NOT NULL,
    space        text        NOT NULL,
    type         text        NOT NULL,
    actor        text        NOT NULL,
    occurred_at  timestamptz NOT NULL,
    data         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (seq, committed_at)
) PARTITION BY RANGE (committed_at);

-- event_log_retention records what retention removed: every seq below
-- low_seq is gone for good. Consumers compare their cursor with it to report
-- the exact range they lost (sync.ConsumerLossHandler).
CREATE TABLE event_log_retention (
    id              boolean     PRIMARY KEY DEFAULT true CHECK (id),
    low_seq         bigint      NOT NULL DEFAULT 1,
    last_dropped_at timestamptz
);
INSERT INTO event_log_retention (id, low_seq) VALUES (true, 1);

-- event_log_partitions keeps the bounds of every partition the maintenance
-- job created, so it never has to parse pg_catalog's bound expressions.
CREATE TABLE event_log_partitions (
    name       text        PRIMARY KEY,
    from_time  timestamptz NOT NULL,
    to_time    timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
