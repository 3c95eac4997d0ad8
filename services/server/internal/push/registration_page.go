package push

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ListPageParams selects one page of a principal's devices.
type ListPageParams struct {
	Principal string
	// AfterCreatedAt and AfterID, when AfterID is set, start the page after
	// that registration in the list's order (created_at, then id).
	AfterCreatedAt time.Time
	AfterID        uuid.UUID
	// Limit is the page size; it must be positive.
	Limit int
}

// ListPage returns a page of the principal's devices in registration
// order. Registering an endpoint again keeps its id and created_at, so a
// device keeps its place and a walk by AfterID sees each device that
// existed when it started exactly once.
func (r *Registry) ListPage(ctx context.Context, db DB, p *ListPageParams) ([]Registration, error) {
	var after *time.Time
	if p.AfterID != uuid.Nil {
		after = &p.AfterCreatedAt
	}
	rows, err := db.Query(ctx, `SELECT `+registrationColumns+`
		FROM push_registrations WHERE principal = $1 AND ($2::timestamptz IS NULL OR (created_at, id) > ($2, $3::uuid))
		ORDER BY created_at, id LIMIT $4`, p.Principal, after, p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list push devices: %w", err)
	}
	return pgx.CollectRows(rows, scanRegistration)
}
