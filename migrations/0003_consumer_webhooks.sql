-- 0003 the webhooks consumer.
--
-- A new consumer starts at the head of the log at the moment its migration
-- runs: events committed before it existed had no receivers of
-- its kind, and replaying the whole retained history would flood receivers.
INSERT INTO event_consumer_cursors (name, last_seq)
SELECT 'webhooks', last_seq FROM event_seq;
