package push

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// receiver is one receiving device and the push service it belongs to.
type receiver struct {
	origin string
	device Device
}

// spaceDevices is what a round read of one space's receivers.
type spaceDevices struct {
	// large: more than PageSize members or devices; the space is paged
	// (push.page).
	large bool
	// list holds the devices of a space that is not large, sorted by
	// origin and registration id.
	list []receiver
}

// roundPlan is the work of one round as HandlePrefix builds it.
type roundPlan struct {
	cfg    *ConsumerConfig
	budget sync.WorkBudget
	// devices holds every space read so far.
	devices map[string]*spaceDevices
	batches *batcher
	// pages holds the page job being filled per large space; pageJobs all
	// of them, in the order they were opened.
	pages     map[string]*PageArgs
	pageJobs  []*PageArgs
	receivers int
}

// minSpacesPerRead keeps a round whose events spread over many spaces from
// reading them one statement each.
const minSpacesPerRead = 8

// readSpaces reads the devices of the first spaces of order (at least one)
// and returns how many it read. It reads as many spaces as the remaining
// receiver budget could take if each were at the paging limit, so a round
// never reads much more than its budget.
func (r *roundPlan) readSpaces(ctx context.Context, tx pgx.Tx, order []string) (int, error) {
	perSpace := r.cfg.PageSize + 1
	k := max(minSpacesPerRead, (r.budget.Receivers-r.receivers)/perSpace)
	k = min(k, len(order))
	rows, err := tx.Query(ctx, spaceDevicesSQL, order[:k], perSpace)
	if err != nil {
		return 0, fmt.Errorf("push receivers of %d spaces: %w", k, err)
	}
	defer rows.Close()
	lists := make([][]receiver, k)
	cut := make([]bool, k) // the members read were cut at perSpace
	for rows.Next() {
		var ord int64
		var members int
		var origin, principal *string
		var id pgtype.UUID
		if err := rows.Scan(&ord, &members, &origin, &id, &principal); err != nil {
			return 0, fmt.Errorf("push receivers: %w", err)
		}
		cut[ord-1] = members == perSpace
		if !id.Valid {
			continue // a space without devices
		}
		rc := receiver{device: Device{RegistrationID: id.Bytes, Principal: *principal}}
		if origin != nil {
			rc.origin = *origin
		}
		lists[ord-1] = append(lists[ord-1], rc)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("push receivers: %w", err)
	}
	for i, l := range lists {
		sd := &spaceDevices{large: cut[i] || len(l) == perSpace}
		if !sd.large {
			sd.list = sortReceivers(l)
		}
		r.devices[order[i]] = sd
	}
	return k, nil
}

// sortReceivers orders l by push service and registration id, so jobs
// are made alike whatever order the database returned.
func sortReceivers(l []receiver) []receiver {
	slices.SortFunc(l, func(a, b receiver) int {
		if c := strings.Compare(a.origin, b.origin); c != 0 {
			return c
		}
		return bytes.Compare(a.device.RegistrationID[:], b.device.RegistrationID[:])
	})
	return l
}

// fits reports whether e's work still fits the round's budget: its
// devices within the receivers left, and a job to spare.
func (r *roundPlan) fits(e *sync.Event) bool {
	sd := r.devices[e.Space]
	return len(r.batches.out)+len(r.pageJobs) < r.budget.Jobs && r.receivers+len(sd.list) <= r.budget.Receivers
}

// add plans e: its messages into the batches, or, in a large space, e
// into that space's page job.
func (r *roundPlan) add(e *sync.Event) {
	sd := r.devices[e.Space]
	if !sd.large {
		be := BatchEvent{Space: e.Space, Seq: e.Seq, EventID: e.ID, Type: e.Type, CommittedAt: e.CommittedAt}
		r.batches.add(&be, sd.list, e.Actor)
		r.receivers += len(sd.list)
		return
	}
	p := r.pages[e.Space]
	if p == nil || len(p.Events) == r.cfg.PageEvents {
		p = &PageArgs{Space: e.Space}
		r.pages[e.Space] = p
		r.pageJobs = append(r.pageJobs, p)
	}
	p.Events = append(p.Events, PageEvent{Seq: e.Seq, EventID: e.ID, Type: e.Type, CommittedAt: e.CommittedAt, Actor: e.Actor})
}

// jobs returns the round's jobs: the page jobs first, since they lead to
// the most work, then the delivery batches.
func (r *roundPlan) jobs() []sync.Job {
	jobs := make([]sync.Job, 0, len(r.pageJobs)+len(r.batches.out))
	for _, p := range r.pageJobs {
		jobs = append(jobs, sync.Job{Args: *p})
	}
	for _, b := range r.batches.out {
		jobs = append(jobs, sync.Job{Args: b.args})
	}
	return jobs
}

// batcher fills push.deliver jobs: one per push service origin and batch
// of up to size messages, each listing its events with their devices at
// that push service.
type batcher struct {
	size int
	out  []*batch
	open map[string]*batch // the batch being filled, by origin
}

type batch struct {
	args DeliverArgs
	n    int
}

func newBatcher(size int) *batcher { return &batcher{size: size, open: map[string]*batch{}} }

// add adds a message about ev for each of rs, except the devices of
// actor, who caused the event.
func (b *batcher) add(ev *BatchEvent, rs []receiver, actor string) {
	for i := range rs {
		rc := &rs[i]
		if rc.device.Principal == actor {
			continue
		}
		bt := b.open[rc.origin]
		if bt == nil || bt.n == b.size {
			bt = &batch{}
			b.open[rc.origin] = bt
			b.out = append(b.out, bt)
		}
		evs := bt.args.Events
		if len(evs) == 0 || evs[len(evs)-1].Seq != ev.Seq {
			bt.args.Events = append(evs, BatchEvent{Space: ev.Space, Seq: ev.Seq, EventID: ev.EventID, Type: ev.Type, CommittedAt: ev.CommittedAt})
		}
		last := &bt.args.Events[len(bt.args.Events)-1]
		last.Devices = append(last.Devices, rc.device)
		bt.n++
	}
}
