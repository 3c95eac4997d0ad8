#!/bin/sh
# lease_sync_trigger.sh BOTHY: what the trigger that keeps pump_* and lease_* one lease during the rename costs a
# sender's renewal (migration 0011, ADR 0066 "Measured"). Migrates a new database with BOTHY (bothy migrate up),
# writes 100 subscriptions, then runs the renewal UPDATE a sender makes (package webhooks/lease, Set) with the
# trigger enabled and disabled in turn, $ROUNDS times each (default 50). Prints, per mode, the median, least and
# most time per renewal over the runs, in microseconds; then the trigger's own time per renewal and the whole
# statement's, as EXPLAIN ANALYZE reports them over 2,000 renewals. The commits are asynchronous (synchronous_commit off):
# the time measured is the statement's, not the wait for the WAL flush, which the trigger does not change.
#
# The server is $PGSERVER (default postgres://postgres@127.0.0.1:5432).
set -eu
BIN=$1
S=${PGSERVER:-postgres://postgres@127.0.0.1:5432}
ROUNDS=${ROUNDS:-50}
DB=bothy_lease_sync_trigger
DIR=$(mktemp -d)
cd "$DIR"
psql -q "$S/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" 2>/dev/null
BOTHY_LOG_LEVEL=warn BOTHY_DATABASE_URL="$S/$DB?sslmode=disable" "$BIN" migrate up >/dev/null
psql -q "$S/$DB" -c "INSERT INTO principals (id, kind) VALUES ('alice', 'user')" \
  -c "INSERT INTO webhook_subscriptions (id, owner, space, url, secret)
      SELECT md5(n::text)::uuid, 'alice', 's1', 'https://receiver.invalid/hook',
             'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=' FROM generate_series(1, 100) n" \
  -c "VACUUM ANALYZE webhook_subscriptions"
# One session alternates ENABLE and DISABLE of the trigger, and after each runs 1,000 renewals (a commit every 100,
# so that HOT pruning keeps up as it does for the senders); the time per renewal of each run is taken with
# clock_timestamp(). Alternating many short runs spreads the load of a shared machine over both modes alike.
PGOPTIONS="-c bench.rounds=$ROUNDS" psql -q "$S/$DB" <<'SQL'
SET synchronous_commit = off;
CREATE TEMP TABLE runs (mode text, us float8);
DO $$
DECLARE t0 timestamptz; m text;
BEGIN
  FOR r IN 1..current_setting('bench.rounds')::int LOOP
    FOREACH m IN ARRAY ARRAY['with', 'without'] LOOP
      IF m = 'with' THEN
        ALTER TABLE webhook_subscriptions ENABLE TRIGGER webhook_subscriptions_lease_sync;
      ELSE
        ALTER TABLE webhook_subscriptions DISABLE TRIGGER webhook_subscriptions_lease_sync;
      END IF;
      COMMIT;
      t0 := clock_timestamp();
      FOR i IN 1..1000 LOOP
        UPDATE webhook_subscriptions SET lease_job_id = i, lease_owner = NULLIF('bothy-p1'::text, ''),
            lease_until = now() + 150000::bigint * interval '1 millisecond'
        WHERE id = md5((i % 100 + 1)::text)::uuid;
        IF i % 100 = 0 THEN COMMIT; END IF;
      END LOOP;
      INSERT INTO runs VALUES (m, extract(epoch FROM clock_timestamp() - t0) * 1000);
      COMMIT;
    END LOOP;
  END LOOP;
END $$;
SELECT mode, count(*) AS runs,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY us)::numeric, 2) AS median_us_per_renewal,
       round(min(us)::numeric, 2) AS min_us, round(max(us)::numeric, 2) AS max_us
FROM runs GROUP BY mode ORDER BY mode;
-- The trigger's own time, as EXPLAIN ANALYZE reports it per renewal, next to the whole statement's.
ALTER TABLE webhook_subscriptions ENABLE TRIGGER webhook_subscriptions_lease_sync;
CREATE TEMP TABLE plans (p jsonb);
DO $$
DECLARE p jsonb;
BEGIN
  FOR i IN 1..2000 LOOP
    EXECUTE format($q$EXPLAIN (ANALYZE, FORMAT JSON)
      UPDATE webhook_subscriptions SET lease_job_id = %s, lease_owner = NULLIF('bothy-p1'::text, ''),
          lease_until = now() + 150000::bigint * interval '1 millisecond'
      WHERE id = md5('%s')::uuid$q$, i, i % 100 + 1) INTO p;
    INSERT INTO plans VALUES (p);
    IF i % 100 = 0 THEN COMMIT; END IF;
  END LOOP;
END $$;
SELECT count(*) AS renewals,
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY (p->0->'Triggers'->0->>'Time')::float8) * 1000)::numeric, 1) AS trigger_median_us,
       round((avg((p->0->'Triggers'->0->>'Time')::float8) * 1000)::numeric, 1) AS trigger_mean_us,
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY (p->0->>'Execution Time')::float8) * 1000)::numeric, 1) AS statement_median_us
FROM plans;
SQL
psql -q "$S/postgres" -c "DROP DATABASE $DB WITH (FORCE)"
cd / && rm -r "$DIR"
