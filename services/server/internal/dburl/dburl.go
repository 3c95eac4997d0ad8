// Package dburl turns a database URL into the URL of another database on
// the same server (the maintenance database "postgres", a new scratch
// database) and drops databases others may still be connected to. Migrate's
// "create the configured database if missing", the load tests' scratch
// databases and the test harness's per-test ones all go through it.
package dburl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// WithDatabase returns u pointing at database name on the same server.
func WithDatabase(u, name string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "postgres" && pu.Scheme != "postgresql") {
		return "", fmt.Errorf("not a postgres:// URL")
	}
	pu.Path = "/" + name
	return pu.String(), nil
}

// NewURL points base at a new, randomly named database prefix_<12 hex>.
// It does not create it.
func NewURL(base, prefix string) (string, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return WithDatabase(base, prefix+"_"+hex.EncodeToString(b))
}

// Name is the database name in u.
func Name(u string) string {
	pu, _ := url.Parse(u)
	if pu == nil {
		return ""
	}
	return strings.TrimPrefix(pu.Path, "/")
}

// Drop drops the database u points at, connecting through the same
// server's postgres database. Dropping a database that does not exist is
// not an error.
func Drop(ctx context.Context, u string) error {
	admin, err := WithDatabase(u, "postgres")
	if err != nil {
		return err
	}
	return DropVia(ctx, admin, Name(u))
}

// DropVia drops database name, connected as admin, ending other sessions on
// it (WITH (FORCE)).
func DropVia(ctx context.Context, admin, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}
