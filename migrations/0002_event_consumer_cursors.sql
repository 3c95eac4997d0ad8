-- 0002 consumer cursors (docs/adr/0010-consumers-with-cursor.md).
--
-- One row per consumer name. A round locks its row FOR UPDATE SKIP LOCKED,
-- so one worker at a time processes a consumer and a second one ends its
-- round at once. The set of rows is the set of allowed consumer names: a
-- new consumer arrives as one additive migration that inserts its row.
--
-- last_round_at is written by every successful round, so "stuck" can be
-- told from "slow" from the database alone (every role exports it).
-- The columns updated by rounds carry no index and the fillfactor is low,
-- so the updates stay HOT.
CREATE TABLE event_consumer_cursors (
    name          text        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    last_seq      bigint      NOT NULL CHECK (last_seq >= 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_round_at timestamptz
) WITH (fillfactor = 20);
