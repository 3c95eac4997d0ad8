#!/bin/sh
# compare_schemas.sh OLD_BOTHY NEW_BOTHY: migrates one new database with each binary (bothy migrate up) and
# compares them: pg_dump --schema-only without the bookkeeping table, and the rows of the tables that migrations
# fill (the counter, the retention mark, the cursors, the partitions) with a row count of every other table.
# Prints both diffs; exit status 1 when either is not empty. It showed that the baseline migration produces the
# schema of the files it replaced (ADR 0066, "Measured").
#
# The server is $PGSERVER (default postgres://postgres@127.0.0.1:5432); the two databases are dropped first.
set -eu
OLD=$1 NEW=$2
S=${PGSERVER:-postgres://postgres@127.0.0.1:5432}
OUT=$(mktemp -d)
status=0
for side in old new; do
  db=bothy_compare_$side
  psql -q "$S/postgres" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" 2>/dev/null
  bin=$OLD; [ $side = new ] && bin=$NEW
  BOTHY_LOG_LEVEL=warn BOTHY_DATABASE_URL="$S/$db?sslmode=disable" "$bin" migrate up
  pg_dump --schema-only --restrict-key=compare --exclude-table=bothy_schema_migrations "$S/$db" |
    grep -v '^--' | grep -v '^$' > "$OUT/$side.schema.sql"
  psql -At "$S/$db" > "$OUT/$side.rows.txt" <<'SQL'
SELECT 'event_seq', last_seq FROM event_seq;
SELECT 'event_log_retention', low_seq, last_dropped_at FROM event_log_retention;
SELECT 'cursor', name, last_seq, last_round_at FROM event_consumer_cursors ORDER BY name;
SELECT 'partition', name, from_time, to_time FROM event_log_partitions ORDER BY name;
SELECT 'rows', c.relname,
       (xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM %I', c.relname), false, true, '')))[1]::text
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname NOT LIKE 'river%'
   AND c.relname <> 'bothy_schema_migrations'
 ORDER BY c.relname;
SQL
  psql -q "$S/postgres" -c "DROP DATABASE $db WITH (FORCE)"
done
echo "schema: $(wc -l < "$OUT/old.schema.sql") lines (old), $(wc -l < "$OUT/new.schema.sql") lines (new)"
diff "$OUT/old.schema.sql" "$OUT/new.schema.sql" && echo "schema diff: empty" || status=1
diff "$OUT/old.rows.txt" "$OUT/new.rows.txt" && echo "rows diff: empty ($(wc -l < "$OUT/old.rows.txt") lines)" || status=1
rm -r "$OUT"
exit $status
