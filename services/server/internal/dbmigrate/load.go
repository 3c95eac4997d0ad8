package dbmigrate

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/bothy/bothy/migrations"
)

// NoTransactionMarker, as a file's first line, runs the file outside a
// transaction: for statements PostgreSQL refuses inside one, such as
// CREATE INDEX CONCURRENTLY. Such a file holds exactly one statement.
const NoTransactionMarker = "-- bothy:no-transaction"

// Migration is one of the project's SQL files.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// Checksum is the hex SHA-256 of SQL. It is recorded when the file is
	// applied, and a file whose text no longer matches it is refused.
	Checksum string
	// NoTransaction is set by NoTransactionMarker on the first line.
	NoTransaction bool
	// Index is the index a no-transaction CREATE INDEX CONCURRENTLY file
	// builds, as the file spells it; empty for every other file.
	Index string
}

// File is the migration's file name.
func (m Migration) File() string { return fileOf(m.Version, m.Name) }

func fileOf(version int, name string) string { return fmt.Sprintf("%04d_%s.sql", version, name) }

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// Load reads the embedded migrations in version order. It fails on a file
// whose name does not follow NNNN_name.sql, on a duplicate version and on a
// misplaced or unusable no-transaction marker, so a mistake is caught by
// every test run rather than in production.
func Load() ([]Migration, error) {
	return load(migrations.FS)
}

func load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || e.Name() == "embed.go" {
			continue
		}
		parts := fileName.FindStringSubmatch(e.Name())
		if parts == nil {
			return nil, fmt.Errorf("migration file %q: name must be NNNN_name.sql", e.Name())
		}
		v, _ := strconv.Atoi(parts[1])
		if prev, ok := seen[v]; ok {
			return nil, fmt.Errorf("migration version %d used by %q and %q", v, prev, e.Name())
		}
		seen[v] = e.Name()
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", e.Name(), err)
		}
		m, err := parse(v, parts[2], body)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) })
	return out, nil
}

// concurrentIndex matches the start of a CREATE INDEX CONCURRENTLY
// statement; namedConcurrentIndex the form a no-transaction file must use,
// capturing the index name as written (plain or quoted).
var (
	concurrentIndex      = regexp.MustCompile(`(?is)^CREATE\s+(UNIQUE\s+)?INDEX\s+CONCURRENTLY\b`)
	namedConcurrentIndex = regexp.MustCompile(`(?is)^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)\s+ON\s`)
)

// parse builds a Migration from a file's text and checks its marker.
func parse(version int, name string, body []byte) (Migration, error) {
	sum := sha256.Sum256(body)
	m := Migration{Version: version, Name: name, SQL: string(body), Checksum: hex.EncodeToString(sum[:])}
	first, rest, _ := strings.Cut(m.SQL, "\n")
	m.NoTransaction = strings.TrimSpace(first) == NoTransactionMarker
	if !m.NoTransaction {
		if strings.Contains(m.SQL, strings.TrimPrefix(NoTransactionMarker, "-- ")) {
			return m, fmt.Errorf("the marker %q counts only as the first line", NoTransactionMarker)
		}
		return m, nil
	}
	stmt := withoutLeadingComments(rest)
	if concurrentIndex.MatchString(stmt) {
		// A build that fails half-way leaves an INVALID index behind. The
		// migrator finds it by this name and drops it before running the
		// file again, and IF NOT EXISTS lets that run succeed when the
		// build completed but its record did not.
		found := namedConcurrentIndex.FindStringSubmatch(stmt)
		if found == nil {
			return m, errors.New("CREATE INDEX CONCURRENTLY must read CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name ON (the rest)")
		}
		m.Index = found[1]
	}
	return m, nil
}

// withoutLeadingComments drops the blank lines and "--" comment lines
// before a statement.
func withoutLeadingComments(sql string) string {
	for {
		sql = strings.TrimLeft(sql, " \t\r\n")
		if !strings.HasPrefix(sql, "--") {
			return sql
		}
		_, sql, _ = strings.Cut(sql, "\n")
	}
}
