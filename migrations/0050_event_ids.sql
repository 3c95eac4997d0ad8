-- 0050 event ids: an event id is appended to the log once.
--
-- A client that retries a request, or a producer that retries its
-- transaction, sends the same event id again. Receivers deduplicate by it
-- (it is the webhook-id), so a second copy in the log would be dropped by
-- some of them and processed twice by others. event_log cannot hold a unique
-- index on id: it is partitioned by committed_at, and a unique index of a
-- partitioned table must contain the partition key. event_ids is that
-- index, outside the log.
--
-- A producer inserts its events' ids here before it takes the counter
-- (INSERT ... ON CONFLICT DO NOTHING) and appends only those that were not
-- there. A concurrent producer with the same id waits on the index entry
-- until the first commits or rolls back, outside the counter's window. This
-- is the only index a producer adds per event.
--
-- seq is not known when the id is inserted (the counter hands it out later),
-- so after_seq records the log's head at that moment: the event's seq is
-- larger, and it is the first event with this id after after_seq. That is
-- how a repeated id finds its logged event without an index on
-- event_log.id: a short range scan of event_log's primary key.
--
-- Retention deletes, before dropping a partition, every id whose after_seq
-- is below the partition's highest seq: all of the partition's events, and
-- perhaps a few that committed right after it (older than the retention
-- period too).
CREATE TABLE event_ids (
    id        uuid   PRIMARY KEY,
    after_seq bigint NOT NULL
);

-- The events appended before this migration: the first event of each id
-- (the log may hold copies from before ids were unique).
INSERT INTO event_ids (id, after_seq)
SELECT DISTINCT ON (id) id, seq - 1 FROM event_log ORDER BY id, seq;
