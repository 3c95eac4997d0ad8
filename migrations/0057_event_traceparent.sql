-- 0057 trace context of events (docs/adr/0063-observability.md).
--
-- traceparent is the W3C trace context (version 00, 55 characters) of the producer's span that committed the
-- event, or NULL when the producer was not traced. Rounds read it with the event, link their span to it, carry it
-- into the event's River jobs, and webhook deliveries send it to the receiver as the traceparent header, so one
-- trace runs from the API request to every delivery attempt. It is written by the producer's one INSERT, as one
-- value for all events of a Write: no extra statement on the hot path.
--
-- event_log is partitioned and may be large. A nullable column without a default is a catalog change only, and
-- so is a CHECK constraint added NOT VALID: the existing rows (all NULL here) are not scanned under the ACCESS
-- EXCLUSIVE lock this takes, which would stop every producer for as long as the scan ran (2.3 s for 2M rows on
-- the development machine; ADR 0063). New rows are checked, and partitions created later (CREATE TABLE ... LIKE
-- event_log INCLUDING ALL, then ATTACH) carry the constraint.
ALTER TABLE event_log ADD COLUMN traceparent text;
ALTER TABLE event_log ADD CONSTRAINT event_log_traceparent_check
    CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;
