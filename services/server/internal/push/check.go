package push

import (
	"context"
	"fmt"
	gosync "sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// decisionKey is one authz question of a batch: the same principal, space
// and event type (and token, for a device registered through one) get the
// same answer, so they are asked once.
type decisionKey struct {
	principal, space, eventType string
	token                       uuid.UUID
}

// keyOf is the question message m to target t asks: with the target's
// token if its device was registered through one.
func keyOf(m *message, t *target) decisionKey {
	k := decisionKey{principal: m.device.Principal, space: m.ev.Space, eventType: m.ev.Type}
	if t.tokenID != nil {
		k.token = *t.tokenID
	}
	return k
}

func (k decisionKey) request() authz.Request {
	req := authz.Request{Action: authz.ActionPushDeliver, Principal: k.principal, Space: k.space, EventType: k.eventType}
	if k.token != uuid.Nil {
		req.Token = &k.token
	}
	return req
}

// deniedError is a message's decision turning into a no between its
// batch's first read and its request.
type deniedError struct{ reason string }

func (e *deniedError) Error() string { return "push.deliver denied: " + e.reason }

// rights holds a batch's decisions and when the statement that read them
// was sent. A request starts only under a decision younger than
// RightsMaxAge (allow): past that, the next request to start reads every
// decision of the batch again, in one statement, while the others wait.
// So a revocation that commits at time r stops every request of the batch
// that starts after r + RightsMaxAge (TestDeliver_RevokeStopsSendsWithinTheBound).
// It is safe for concurrent use.
type rights struct {
	w    *DeliverWorker
	mu   gosync.Mutex
	at   time.Time
	decs map[decisionKey]authz.Decision
}

// decision is k's decision as last read, without reading it again.
func (r *rights) decision(k decisionKey) authz.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.decs[k]
}

// allow returns nil if k is allowed by a decision at most RightsMaxAge old,
// a *deniedError if it is not, or the error of reading the decisions again.
func (r *rights) allow(ctx context.Context, k decisionKey) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.at) > r.w.cfg.RightsMaxAge {
		if err := r.refresh(ctx); err != nil {
			return err
		}
	}
	if d := r.decs[k]; !d.Allowed {
		return &deniedError{reason: d.Reason}
	}
	return nil
}

// refresh reads every decision of the batch again in one statement.
func (r *rights) refresh(ctx context.Context) error {
	keys := make([]decisionKey, 0, len(r.decs))
	for k := range r.decs {
		keys = append(keys, k)
	}
	ctx, cancel := context.WithTimeout(ctx, r.w.cfg.QueryTimeout)
	defer cancel()
	b := &pgx.Batch{}
	at := time.Now()
	pending, err := queueKeys(b, keys)
	if err != nil {
		return err
	}
	if err := r.w.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("read the rights of %d principals again: %w", len(keys), err)
	}
	decs, err := decide(keys, pending)
	if err != nil {
		return err
	}
	r.decs, r.at = decs, at
	return nil
}

// queueKeys adds one statement deciding every key to b.
func queueKeys(b *pgx.Batch, keys []decisionKey) ([]*authz.Pending, error) {
	reqs := make([]authz.Request, len(keys))
	for i, k := range keys {
		reqs[i] = k.request()
	}
	return authz.QueueMany(b, reqs)
}

// decide returns each key's decision from the rows its statement read.
func decide(keys []decisionKey, pending []*authz.Pending) (map[decisionKey]authz.Decision, error) {
	decs := make(map[decisionKey]authz.Decision, len(keys))
	for i, k := range keys {
		d, err := pending[i].Decision()
		if err != nil {
			return nil, err
		}
		decs[k] = d
	}
	return decs, nil
}

// check reads the batch's registrations, with their preferences and
// recorded answers, and the rights of its principals, set-based, in one
// round trip: one statement for every distinct principal and space.
// Devices registered through a token need that token's current scopes,
// which only their registration names: their decisions are read in a
// second round trip, one more statement, which only batches with such
// devices pay. The decisions count as read when the first round trip
// started.
func (w *DeliverWorker) check(ctx context.Context, msgs []message) ([]target, *rights, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.QueryTimeout)
	defer cancel()
	at := time.Now()
	b := &pgx.Batch{}
	targets := queueTargets(b, msgs)
	own := distinctKeys(msgs, nil)
	pending, err := queueKeys(b, own)
	if err != nil {
		return nil, nil, err
	}
	if err := w.db.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, fmt.Errorf("read %d registrations and rights: %w", len(msgs), err)
	}
	decs, err := decide(own, pending)
	if err != nil {
		return nil, nil, err
	}
	if err := w.checkTokens(ctx, msgs, targets, decs); err != nil {
		return nil, nil, err
	}
	used := map[decisionKey]authz.Decision{}
	for i := range msgs {
		if targets[i].found {
			k := keyOf(&msgs[i], &targets[i])
			used[k] = decs[k]
		}
	}
	return targets, &rights{w: w, at: at, decs: used}, nil
}

// checkTokens reads, in a second round trip, the decisions of the
// messages whose device was registered through a token, with that
// token's current scopes, into decs; a batch without such devices makes
// none.
func (w *DeliverWorker) checkTokens(ctx context.Context, msgs []message, targets []target, decs map[decisionKey]authz.Decision) error {
	keys := distinctKeys(msgs, targets)
	if len(keys) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	pending, err := queueKeys(b, keys)
	if err != nil {
		return err
	}
	if err := w.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("read token scopes: %w", err)
	}
	tokenDecs, err := decide(keys, pending)
	if err != nil {
		return err
	}
	for k, d := range tokenDecs {
		decs[k] = d
	}
	return nil
}

// distinctKeys lists the distinct questions of msgs: without targets, of
// their principals' own rights; with them, those through a token of the
// devices that registered through one.
func distinctKeys(msgs []message, targets []target) []decisionKey {
	seen := map[decisionKey]bool{}
	var keys []decisionKey
	for i := range msgs {
		k := decisionKey{principal: msgs[i].device.Principal, space: msgs[i].ev.Space, eventType: msgs[i].ev.Type}
		if targets != nil {
			if !targets[i].found || targets[i].tokenID == nil {
				continue
			}
			k = keyOf(&msgs[i], &targets[i])
		}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// queueTargets adds the read of msgs' registrations (targetsSQL) to b and
// returns a target per message, filled in when b's results are read; a
// message whose registration is gone keeps a target not found.
func queueTargets(b *pgx.Batch, msgs []message) []target {
	// uuid.UUID would be encoded through its text form; [16]byte is
	// copied as it is.
	regs := make([][16]byte, len(msgs))
	spaces := make([]string, len(msgs))
	seqs := make([]int64, len(msgs))
	for i, m := range msgs {
		regs[i], spaces[i], seqs[i] = m.device.RegistrationID, m.ev.Space, m.ev.Seq
	}
	targets := make([]target, len(msgs))
	b.Queue(targetsSQL, regs, spaces, seqs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var ord int64
			var t target
			if err := rows.Scan(&ord, &t.principal, &t.endpoint, &t.p256dh, &t.auth, &t.tokenID, &t.wants, &t.recorded); err != nil {
				return err
			}
			if ord < 1 || int(ord) > len(targets) {
				return fmt.Errorf("registration row %d of %d", ord, len(targets))
			}
			t.found = true
			targets[ord-1] = t
		}
		return rows.Err()
	})
	return targets
}
