// Package authz decides who may do what in bothy: principals (users and
// apps), their rights on spaces (read < write < admin) and tokens whose
// scopes narrow those rights.
//
// Everything is read from the database at each call, through the caller's
// pool or transaction, so a revoked right, a revoked token or a removed
// scope takes effect on the very next decision. There is no cache on
// purpose; one decision is one round trip of indexed reads, which a caller
// may share with its own queries (Queue), and many decisions are one
// statement (QueueMany). How old a decision a delivery may still act on is
// the caller's rule: push reads its batch's decisions again once they are
// push.rights_max_age old; webhooks, within the sender's stated bound.
package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Action is something a principal asks to do.
type Action string

const (
	// ActionWebhookDeliver sends one event to a webhook subscription's
	// target. It requires read on the event's space and a scope covering
	// events:read for that space.
	ActionWebhookDeliver Action = "webhook_out.deliver"
	// ActionPushDeliver sends one event as a push notification; same rule
	// as ActionWebhookDeliver.
	ActionPushDeliver Action = "push.deliver"
	// ActionWebhookManage creates or changes a webhook subscription on a
	// space: read on the space and scope webhooks:manage.
	ActionWebhookManage Action = "webhooks.manage"
	// ActionPushManage registers or removes a push subscription: read on
	// the space and scope push:manage.
	ActionPushManage Action = "push.manage"
	// ActionEventsRead reads a space's events through the API (pull,
	// stream, by id, the types seen): read on the space and scope
	// events:read, what a delivery of them needs.
	ActionEventsRead Action = "events.read"
)

// Right is a principal's right on a space. Rights are ordered: admin
// includes write, write includes read.
type Right string

const (
	RightRead  Right = "read"
	RightWrite Right = "write"
	RightAdmin Right = "admin"
)

// rank orders rights; 0 is "none or unknown".
func (r Right) rank() int {
	switch r {
	case RightRead:
		return 1
	case RightWrite:
		return 2
	case RightAdmin:
		return 3
	}
	return 0
}

// Valid reports whether r is one of the three rights.
func (r Right) Valid() bool { return r.rank() > 0 }

// Includes reports whether r is at least want.
func (r Right) Includes(want Right) bool { return r.rank() >= want.rank() && want.rank() > 0 }

// Scopes a token may carry. A scope may be restricted to one space by
// appending "@" and the space name ("events:read@team-a"); scope names
// never contain "@", so the first "@" separates them.
const (
	ScopeEventsRead     = "events:read"
	ScopeWebhooksManage = "webhooks:manage"
	ScopePushManage     = "push:manage"
	// ScopeOpsRead lets a token read the server's operational state
	// (consumer cursors and lag). That state spans every space, so the
	// scope has no space-restricted form.
	ScopeOpsRead = "ops:read"
	// ScopePrincipalsManage lets a token administer principals: create
	// them, mint and revoke their tokens, and change the members of the
	// spaces its principal is admin of (see admin.go). A token minted with
	// it can act as any principal it mints a token for, so it is handed
	// out like database access: by the bootstrap CLI, or by a token that
	// carries it. It has no space-restricted form.
	ScopePrincipalsManage = "principals:manage"
)

var knownScopes = []string{ScopeEventsRead, ScopeWebhooksManage, ScopePushManage, ScopeOpsRead, ScopePrincipalsManage}

// globalScopes are the known scopes that take no "@SPACE".
var globalScopes = []string{ScopeOpsRead, ScopePrincipalsManage}

// rule is what an action needs.
type rule struct {
	right Right
	scope string
}

var rules = map[Action]rule{
	ActionWebhookDeliver: {right: RightRead, scope: ScopeEventsRead},
	ActionPushDeliver:    {right: RightRead, scope: ScopeEventsRead},
	ActionWebhookManage:  {right: RightRead, scope: ScopeWebhooksManage},
	ActionPushManage:     {right: RightRead, scope: ScopePushManage},
	ActionEventsRead:     {right: RightRead, scope: ScopeEventsRead},
}

var (
	// ErrNotFound is returned when a principal or token does not exist.
	ErrNotFound = errors.New("not found")
	// ErrUnauthenticated is returned by Authenticate for a malformed,
	// unknown, revoked or expired bearer token, or a disabled principal.
	// It never says which, so callers cannot probe tokens.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrInvalid is returned for a malformed right, scope or name.
	ErrInvalid = errors.New("invalid")
	// ErrUnknownAction is returned by Allowed for an action without a rule.
	ErrUnknownAction = errors.New("unknown action")
)

// Querier is what both *pgxpool.Pool and pgx.Tx offer.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Request asks whether Principal may do Action on Space.
type Request struct {
	Action    Action
	Principal string
	// Scopes narrow the principal's rights; nil means the principal's own
	// full rights (an operator or a first-party session). An empty non-nil
	// slice allows nothing.
	Scopes []string
	// Token, if set, makes Allowed read the scopes of that token from the
	// database instead of using Scopes: a revoked or expired token, or one
	// belonging to another principal, allows nothing. This is how a stored
	// grant (a webhook subscription created through an app's token) is
	// checked with its current scopes.
	Token *uuid.UUID
	// Space the action touches (the event's space for deliveries).
	Space string
	// EventType of the event being delivered, if any. No rule looks at it
	// yet; it is part of the request so that type-restricted scopes can be
	// added without changing callers.
	EventType string
}

// Decision is Allowed's answer. Reason says why, for logs and the
// owner-visible attempt record; it never contains a secret.
type Decision struct {
	Allowed bool
	Reason  string
}

func deny(format string, args ...any) Decision {
	return Decision{Reason: fmt.Sprintf(format, args...)}
}

const decideSQL = `
SELECT p.disabled_at IS NULL,
       (SELECT m."right"::text FROM space_members m WHERE m.space = $2 AND m.principal = p.id)
FROM principals p WHERE p.id = $1`

const tokenScopesSQL = `
SELECT principal, scopes, revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
FROM tokens WHERE id = $1`

// Allowed decides req with the data as it is now in q. An error means the
// decision could not be made (database trouble, unknown action); a denial
// is a Decision with Allowed false and a Reason, not an error. Its reads
// go to the server in one round trip.
func Allowed(ctx context.Context, q Querier, req *Request) (Decision, error) {
	b := &pgx.Batch{}
	p, err := Queue(b, req)
	if err != nil {
		return Decision{}, err
	}
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return Decision{}, fmt.Errorf("authz %s: read rights: %w", req.Action, err)
	}
	return p.Decision()
}

// Pending is a decision whose reads were queued in a pgx.Batch by Queue.
type Pending struct {
	req  Request
	rule rule

	principalFound, active bool
	right                  *string

	tokenFound, tokenUsable bool
	tokenOwner              string
	tokenScopes             []string
}

// Queue adds the reads of a decision on req to b, so that a caller can
// send them in the same round trip as its own queries (a delivery job
// reading its target). Call Decision once the batch's results were closed
// without error.
func Queue(b *pgx.Batch, req *Request) (*Pending, error) {
	rl, ok := rules[req.Action]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownAction, req.Action)
	}
	p := &Pending{req: *req, rule: rl}
	b.Queue(decideSQL, req.Principal, req.Space).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&p.active, &p.right)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		p.principalFound = err == nil
		return err
	})
	if req.Token != nil {
		b.Queue(tokenScopesSQL, *req.Token).QueryRow(p.scanToken)
	}
	return p, nil
}

// decideManySQL reads what the decisions of a set of requests need, one
// row per request in their order: principal, right on the space and, for
// a request through a token, the token's owner, scopes and state. Each is
// an index probe: the LIMIT 1 laterals keep the planner from hashing the
// whole tables, which it chose for a few hundred requests, a cost that
// grows with the tables instead of with the requests.
const decideManySQL = `
SELECT q.ord, p.id IS NOT NULL, p.disabled_at IS NULL, m."right"::text,
       t.id IS NOT NULL, coalesce(t.principal, ''), t.scopes,
       coalesce(t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now()), false)
FROM unnest($1::text[], $2::text[], $3::uuid[]) WITH ORDINALITY AS q(principal, space, token, ord)
LEFT JOIN LATERAL (SELECT * FROM principals p WHERE p.id = q.principal LIMIT 1) p ON true
LEFT JOIN LATERAL (SELECT * FROM space_members m WHERE m.space = q.space AND m.principal = q.principal LIMIT 1) m ON true
LEFT JOIN LATERAL (SELECT * FROM tokens t WHERE t.id = q.token LIMIT 1) t ON true`

// QueueMany adds the reads of a decision on each of reqs to b as one
// statement, whatever the number of principals and tokens: a caller that
// decides for many principals at once (a push batch) reads their rights
// in one snapshot, at the cost of one statement instead of one each. Call
// Decision on each returned Pending once the batch's results were closed
// without error. Scopes in reqs are used as in Allowed.
func QueueMany(b *pgx.Batch, reqs []Request) ([]*Pending, error) {
	out := make([]*Pending, len(reqs))
	principals := make([]string, len(reqs))
	spaces := make([]string, len(reqs))
	tokens := make([]pgtype.UUID, len(reqs))
	for i := range reqs {
		rl, ok := rules[reqs[i].Action]
		if !ok {
			return nil, fmt.Errorf("%w %q", ErrUnknownAction, reqs[i].Action)
		}
		out[i] = &Pending{req: reqs[i], rule: rl}
		principals[i], spaces[i] = reqs[i].Principal, reqs[i].Space
		if t := reqs[i].Token; t != nil {
			tokens[i] = pgtype.UUID{Bytes: *t, Valid: true}
		}
	}
	b.Queue(decideManySQL, principals, spaces, tokens).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var ord int64
			var tokenFound bool
			var p Pending
			if err := rows.Scan(&ord, &p.principalFound, &p.active, &p.right, &tokenFound, &p.tokenOwner, &p.tokenScopes, &p.tokenUsable); err != nil {
				return err
			}
			if ord < 1 || int(ord) > len(out) {
				return fmt.Errorf("authz: decision row %d of %d", ord, len(out))
			}
			o := out[ord-1]
			o.principalFound, o.active, o.right = p.principalFound, p.active, p.right
			if o.req.Token != nil {
				o.tokenFound, o.tokenOwner, o.tokenScopes, o.tokenUsable = tokenFound, p.tokenOwner, p.tokenScopes, p.tokenUsable
			}
		}
		return rows.Err()
	})
	return out, nil
}

// ReadToken makes the decision one through token, reading the token's
// scopes now, for a caller that learns the token only from the rows its
// batch returned (a device registered through a token). The principal's
// rights already read are kept.
func (p *Pending) ReadToken(ctx context.Context, q Querier, token uuid.UUID) error {
	p.req.Token = &token
	if err := p.scanToken(q.QueryRow(ctx, tokenScopesSQL, token)); err != nil {
		return fmt.Errorf("authz %s: read token scopes: %w", p.req.Action, err)
	}
	return nil
}

func (p *Pending) scanToken(row pgx.Row) error {
	err := row.Scan(&p.tokenOwner, &p.tokenScopes, &p.tokenUsable)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	p.tokenFound = err == nil
	return err
}

// Decision decides from the rows the batch returned.
func (p *Pending) Decision() (Decision, error) {
	req, rl := &p.req, p.rule
	if !p.principalFound {
		return deny("principal %q does not exist", req.Principal), nil
	}
	if !p.active {
		return deny("principal %q is disabled", req.Principal), nil
	}
	if p.right == nil {
		return deny("principal %q has no right on space %q", req.Principal, req.Space), nil
	}
	if !Right(*p.right).Includes(rl.right) {
		return deny("principal %q has %s on space %q, %s needs %s", req.Principal, *p.right, req.Space, req.Action, rl.right), nil
	}

	scopes := req.Scopes
	if req.Token != nil {
		if !p.tokenFound {
			return deny("token %s does not exist", req.Token), nil
		}
		if !p.tokenUsable {
			return deny("token %s is revoked or expired", req.Token), nil
		}
		if p.tokenOwner != req.Principal {
			return deny("token %s belongs to another principal", req.Token), nil
		}
		scopes = p.tokenScopes
		if scopes == nil {
			scopes = []string{}
		}
	}
	if scopes != nil && !Covers(scopes, rl.scope, req.Space) {
		return deny("no scope covers %s on space %q", rl.scope, req.Space), nil
	}
	return Decision{Allowed: true, Reason: fmt.Sprintf("%s on space %q", *p.right, req.Space)}, nil
}

// Covers reports whether one of scopes grants scope on space: the bare
// scope does for every space, "scope@space" for that space only.
func Covers(scopes []string, scope, space string) bool {
	return slices.ContainsFunc(scopes, func(s string) bool {
		base, sp, restricted := strings.Cut(s, "@")
		return base == scope && (!restricted || sp == space)
	})
}

// ValidateScopes checks that every scope is known, in bare or
// space-restricted form, and names the first bad one.
func ValidateScopes(scopes []string) error {
	for _, s := range scopes {
		base, sp, restricted := strings.Cut(s, "@")
		if !slices.Contains(knownScopes, base) {
			return fmt.Errorf("scope %q: %w: want one of %s, optionally followed by @SPACE", s, ErrInvalid, strings.Join(knownScopes, ", "))
		}
		if restricted && slices.Contains(globalScopes, base) {
			return fmt.Errorf("scope %q: %w: %s covers every space and takes no @SPACE", s, ErrInvalid, base)
		}
		if restricted && !namePattern.MatchString(sp) {
			return fmt.Errorf("scope %q: %w space name", s, ErrInvalid)
		}
	}
	return nil
}
