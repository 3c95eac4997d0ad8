#!/bin/sh
# index_build_writers.sh: how long writers wait while an index is built on a table of 1,000,000 rows, built as a
# migration in a transaction runs it (BEGIN; CREATE INDEX; COMMIT) and as a no-transaction migration runs it
# (CREATE INDEX CONCURRENTLY). One pgbench client inserts for 25 s; the build starts after 3 s. Prints the build
# time, the inserts made and the longest insert (ADR 0066, "Measured").
#
# The server is $PGSERVER (default postgres://postgres@127.0.0.1:5432); pgbench comes from pg_config --bindir.
set -eu
S=${PGSERVER:-postgres://postgres@127.0.0.1:5432}
DB=bothy_index_build_writers
PGBENCH=$(pg_config --bindir)/pgbench
DIR=$(mktemp -d)
cd "$DIR"
psql -q "$S/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" 2>/dev/null
psql -q "$S/$DB" -c "CREATE TABLE big (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, x int NOT NULL, pad text NOT NULL)" \
  -c "INSERT INTO big (x, pad) SELECT (random() * 1e9)::int, repeat('p', 40) FROM generate_series(1, 1000000)" \
  -c "VACUUM ANALYZE big"
echo "INSERT INTO big (x, pad) VALUES ((random() * 1e9)::int, 'w');" > insert.sql
for mode in transaction concurrently; do
  psql -q "$S/$DB" -c "DROP INDEX IF EXISTS big_x" 2>/dev/null
  rm -f pgbench_log.*
  "$PGBENCH" -n -f insert.sql -T 25 -c 1 -l "$S/$DB" > pgbench.out 2>&1 &
  bench=$!
  sleep 3
  start=$(date +%s%N)
  if [ $mode = transaction ]; then
    psql -q "$S/$DB" -c "BEGIN" -c "CREATE INDEX big_x ON big (x)" -c "COMMIT"
  else
    psql -q "$S/$DB" -c "CREATE INDEX CONCURRENTLY big_x ON big (x)"
  fi
  end=$(date +%s%N)
  wait $bench
  awk -v m=$mode -v ms=$(( (end - start) / 1000000 )) '{ n++; if ($3 > max) max = $3 }
    END { printf "%-13s build %d ms; %d inserts in 25 s, longest %.0f ms\n", m, ms, n, max / 1000 }' pgbench_log.*
done
psql -q "$S/postgres" -c "DROP DATABASE $DB WITH (FORCE)"
cd / && rm -r "$DIR"
