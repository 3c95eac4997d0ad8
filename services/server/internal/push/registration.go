package push

import (
	"context"
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bothy/bothy/services/server/internal/egress"
)

var (
	// ErrInvalidRegistration is returned by Registry.Register for a
	// subscription that could never receive a message: an endpoint that is
	// not https (or points at a private address), keys that are not a P-256
	// point and a 16-byte secret. The wrapping error names the field.
	ErrInvalidRegistration = errors.New("invalid push registration")
	// ErrNotFound is returned when a registration does not exist (it was
	// removed, or the push service reported it gone).
	ErrNotFound = errors.New("push registration not found")
	// ErrEndpointTaken is returned by Registry.Register when another
	// principal registered the endpoint. An endpoint is a capability URL
	// and unique (push_registrations.endpoint): a second principal presenting it is the
	// same browser signed in to another account or someone who learned the
	// URL, and handing them the row would silently stop the owner's
	// notifications. The owner deletes its registration first.
	ErrEndpointTaken = errors.New("push endpoint is registered by another principal")

	// errPrivateTarget is returned by the dialer for an address the egress
	// policy refuses (push.allow_private_targets is its AllowPrivate).
	errPrivateTarget = errors.New("refusing to connect to a non-public push endpoint address")
)

// Subscription is a browser's PushSubscription as its toJSON() gives it.
type Subscription struct {
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256dh string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
}

// Registration is one device of a principal.
type Registration struct {
	ID        uuid.UUID
	Principal string
	Endpoint  string
	// P256dh and Auth are unpadded base64url.
	P256dh, Auth string
	UserAgent    string
	// TokenID is the token the device was registered through; deliveries
	// check its current scopes. Nil: the principal's own rights.
	TokenID   *uuid.UUID
	CreatedAt time.Time
	UpdatedAt time.Time
}

// RegisterParams is a device to register.
type RegisterParams struct {
	Principal    string
	Subscription Subscription
	// UserAgent is shown to the principal when listing devices; optional.
	UserAgent string
	// TokenID, if set, is the token the request came with: deliveries to
	// the device then need that token's scopes as they are at send time.
	TokenID *uuid.UUID
}

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// AllowPrivateTargets accepts http:// endpoints and endpoints on
	// loopback and private addresses (push.allow_private_targets; load tests
	// and local development only). Default false.
	AllowPrivateTargets bool
}

// Registry stores devices and notification preferences. It is safe for
// concurrent use. Every method takes the querier to run on, so callers can
// make a registration part of their own transaction.
type Registry struct {
	cfg RegistryConfig
}

// NewRegistry returns a registry.
func NewRegistry(cfg *RegistryConfig) *Registry {
	r := &Registry{}
	if cfg != nil {
		r.cfg = *cfg
	}
	return r
}

// DB is what both *pgxpool.Pool and pgx.Tx offer.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var principalPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// Validate checks a registration without storing it and returns the
// subscription with its keys in unpadded base64url.
func (r *Registry) Validate(p *RegisterParams) (Subscription, error) {
	s := p.Subscription
	if !principalPattern.MatchString(p.Principal) {
		return s, fmt.Errorf("%w: principal %q: want 1-128 characters of letters, digits and ._:@-", ErrInvalidRegistration, p.Principal)
	}
	// PostgreSQL refuses text that is not UTF-8 or holds NUL with a raw
	// error; say which field is wrong instead (found by FuzzRegister).
	for _, f := range []struct{ name, v string }{{"endpoint", s.Endpoint}, {"user agent", p.UserAgent}} {
		if !utf8.ValidString(f.v) || strings.ContainsRune(f.v, 0) {
			return s, fmt.Errorf("%w: %s: not valid UTF-8 text", ErrInvalidRegistration, f.name)
		}
	}
	if err := checkEndpoint(s.Endpoint, r.cfg.AllowPrivateTargets); err != nil {
		return s, fmt.Errorf("%w: endpoint: %v", ErrInvalidRegistration, err)
	}
	dh, err := decodeKey(s.Keys.P256dh)
	if err != nil {
		return s, fmt.Errorf("%w: keys.p256dh: %v", ErrInvalidRegistration, err)
	}
	if _, err := ecdh.P256().NewPublicKey(dh); err != nil {
		return s, fmt.Errorf("%w: keys.p256dh: not an uncompressed P-256 public key (%d bytes)", ErrInvalidRegistration, len(dh))
	}
	auth, err := decodeKey(s.Keys.Auth)
	if err != nil {
		return s, fmt.Errorf("%w: keys.auth: %v", ErrInvalidRegistration, err)
	}
	if len(auth) != 16 {
		return s, fmt.Errorf("%w: keys.auth: %d bytes, want 16", ErrInvalidRegistration, len(auth))
	}
	if len(p.UserAgent) > 512 {
		return s, fmt.Errorf("%w: user agent: %d bytes, at most 512", ErrInvalidRegistration, len(p.UserAgent))
	}
	s.Keys.P256dh = base64.RawURLEncoding.EncodeToString(dh)
	s.Keys.Auth = base64.RawURLEncoding.EncodeToString(auth)
	return s, nil
}

// checkEndpoint accepts an https URL (http too when allowPrivate) that
// the egress policy accepts without resolving it. Host names are checked at
// dial time, where their addresses are known.
func checkEndpoint(raw string, allowPrivate bool) error {
	if raw == "" {
		return errors.New("missing")
	}
	u, err := egress.Policy{AllowPrivate: allowPrivate}.CheckURL(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "https" && !allowPrivate {
		return fmt.Errorf("scheme %q: push endpoints must be https", u.Scheme)
	}
	return nil
}

// decodeKey accepts base64url or standard base64, padded or not, as
// browsers and libraries hand subscriptions around in both.
func decodeKey(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("missing")
	}
	t := strings.TrimRight(s, "=")
	if b, err := base64.RawURLEncoding.DecodeString(t); err == nil {
		return b, nil
	}
	if b, err := base64.RawStdEncoding.DecodeString(t); err == nil {
		return b, nil
	}
	return nil, errors.New("not base64url")
}

const registerSQL = `
INSERT INTO push_registrations (id, principal, endpoint, p256dh, auth, user_agent, token_id)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (endpoint) DO UPDATE
SET p256dh = excluded.p256dh, auth = excluded.auth,
    user_agent = excluded.user_agent, token_id = excluded.token_id, updated_at = now()
WHERE push_registrations.principal = excluded.principal
RETURNING ` + registrationColumns

const registrationColumns = `id, principal, endpoint, p256dh, auth, user_agent, token_id, created_at, updated_at`

// Register validates and stores a device. The same principal registering
// an endpoint again replaces its keys and keeps its id; an endpoint of
// another principal returns ErrEndpointTaken and changes nothing.
func (r *Registry) Register(ctx context.Context, db DB, p *RegisterParams) (Registration, error) {
	s, err := r.Validate(p)
	if err != nil {
		return Registration{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Registration{}, err
	}
	rows, err := db.Query(ctx, registerSQL, id, p.Principal, s.Endpoint, s.Keys.P256dh, s.Keys.Auth, p.UserAgent, p.TokenID)
	if err != nil {
		return Registration{}, fmt.Errorf("register push device: %w", err)
	}
	reg, err := pgx.CollectExactlyOneRow(rows, scanRegistration)
	if errors.Is(err, pgx.ErrNoRows) { // the conflict's WHERE kept another principal's row
		return Registration{}, ErrEndpointTaken
	}
	if err != nil {
		return Registration{}, fmt.Errorf("register push device: %w", err)
	}
	return reg, nil
}

// Unregister removes a principal's device. It returns ErrNotFound when the
// principal has no such registration.
func (r *Registry) Unregister(ctx context.Context, db DB, principal string, id uuid.UUID) error {
	tag, err := db.Exec(ctx, `DELETE FROM push_registrations WHERE id = $1 AND principal = $2`, id, principal)
	if err != nil {
		return fmt.Errorf("unregister push device: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// List returns a principal's devices, oldest first.
func (r *Registry) List(ctx context.Context, db DB, principal string) ([]Registration, error) {
	rows, err := db.Query(ctx, `SELECT `+registrationColumns+`
		FROM push_registrations WHERE principal = $1 ORDER BY created_at, id`, principal)
	if err != nil {
		return nil, fmt.Errorf("list push devices: %w", err)
	}
	return pgx.CollectRows(rows, scanRegistration)
}

// Get returns a registration by id.
func (r *Registry) Get(ctx context.Context, db DB, id uuid.UUID) (Registration, error) {
	rows, err := db.Query(ctx, `SELECT `+registrationColumns+`
		FROM push_registrations WHERE id = $1`, id)
	if err != nil {
		return Registration{}, fmt.Errorf("get push device: %w", err)
	}
	reg, err := pgx.CollectExactlyOneRow(rows, scanRegistration)
	if errors.Is(err, pgx.ErrNoRows) {
		return Registration{}, ErrNotFound
	}
	if err != nil {
		return Registration{}, fmt.Errorf("get push device: %w", err)
	}
	return reg, nil
}

// SetPreferenceParams is a principal's choice for a space.
type SetPreferenceParams struct {
	Principal string
	Space     string
	// Notify false mutes the space for all the principal's devices.
	Notify bool
}

// SetPreference stores whether a principal wants pushes for a space. The
// default (no row) is to notify, so turning it back on removes the row.
func (r *Registry) SetPreference(ctx context.Context, db DB, p *SetPreferenceParams) error {
	if !principalPattern.MatchString(p.Principal) {
		return fmt.Errorf("push preference: principal %q is not a valid name", p.Principal)
	}
	if !principalPattern.MatchString(p.Space) {
		return fmt.Errorf("push preference: space %q is not a valid name", p.Space)
	}
	var err error
	if p.Notify {
		_, err = db.Exec(ctx, `DELETE FROM push_preferences WHERE principal = $1 AND space = $2`, p.Principal, p.Space)
	} else {
		_, err = db.Exec(ctx, `INSERT INTO push_preferences (principal, space, notify) VALUES ($1, $2, false)
			ON CONFLICT (principal, space) DO UPDATE SET notify = false, updated_at = now()`, p.Principal, p.Space)
	}
	if err != nil {
		return fmt.Errorf("push preference: %w", err)
	}
	return nil
}

func scanRegistration(row pgx.CollectableRow) (Registration, error) {
	var g Registration
	err := row.Scan(&g.ID, &g.Principal, &g.Endpoint, &g.P256dh, &g.Auth, &g.UserAgent, &g.TokenID, &g.CreatedAt, &g.UpdatedAt)
	return g, err
}
