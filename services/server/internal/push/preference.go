package push

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Preference reports whether the principal wants pushes for the space: true
// unless it muted the space (SetPreference).
func (r *Registry) Preference(ctx context.Context, db DB, principal, space string) (bool, error) {
	var notify bool
	err := db.QueryRow(ctx, `SELECT notify FROM push_preferences WHERE principal = $1 AND space = $2`, principal, space).Scan(&notify)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("push preference: %w", err)
	}
	return notify, nil
}
