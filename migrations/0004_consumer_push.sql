-- 0004 the push consumer. Added on its own,
-- like any later consumer: one row, no producer change. Starts at the head.
INSERT INTO event_consumer_cursors (name, last_seq)
SELECT 'push', last_seq FROM event_seq;
