package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// history is everything the checks look at, as plain data: the database's
// final state, what the producers were told, what the receivers saw, the
// faults and the run. loadHistory gathers it from a run; a test crafts one.
type history struct {
	start        time.Time
	short        bool
	crashSkipped string // why the run had no crash; "" when one was planned
	drainTimeout time.Duration
	drained      bool
	drainTook    time.Duration
	procsStarted int

	// unread names each table the harness could not read, with the error;
	// the checks that need one are hidden instead of run.
	unread map[string]error

	// The database after the drain.
	head            int64
	events          []logEvent
	cursors         []cursorRow
	subStatus       map[uuid.UUID]string
	deliveries      map[uuid.UUID][]deliveryRow // in seq order
	dupDeliveryJobs map[uuid.UUID]int           // webhook_out.deliver jobs beyond one per (subscription, seq)
	pushJobs        map[uuid.UUID]map[int64][]pushJob
	pushSends       map[uuid.UUID]map[int64]int16

	// What the producers were told: the seq of every acknowledged event,
	// and the events in doubt and rolled back on purpose.
	acked      map[uuid.UUID]int64
	ackedHTTP  int
	doubt      map[uuid.UUID]bool
	rolledBack map[uuid.UUID]bool
	rbBefore   int
	rbAtCommit int
	crashes    []crashResult

	// What the receivers saw.
	targets        []targetRecord
	devices        []deviceRecord
	pushErrors     []error // requests that failed VAPID or decryption
	pushBadJSON    int
	pushRevoked    bool
	pushRevokedSeq int64

	// The faults.
	faults    map[string]faultCount
	faultLog  []faultEvent
	takeovers []takeover
	freezes   []freeze

	// problems are the bothy processes' own failures: unexpected exits,
	// unclean stops, failed starts, refused appends. harnessErrs are the
	// soak's.
	problems    []string
	harnessErrs []harnessError
}

// Tables the verifier reads, as unread names them.
const (
	tableEventLog  = "event_log"
	tableCursors   = "event_consumer_cursors"
	tableSubs      = "webhook_subscriptions"
	tableDelivery  = "webhook_deliveries"
	tableWHJobs    = "river_job (webhook_out.deliver)"
	tablePushJobs  = "river_job (push.deliver)"
	tablePushSends = "push_sends"
)

// faultCount is how often a fault kind was injected and the figure
// recorded with it (for terminations, the backends terminated).
type faultCount struct{ n, x int }

// cursorRow is one consumer's cursor.
type cursorRow struct {
	name string
	last int64
}

// targetRecord is one webhook target as the soak saw it.
type targetRecord struct {
	name, space, owner string
	id                 uuid.UUID
	resumes            []int64 // resume_after_seq at creation and after every enable
	revoked            bool    // the owner's right was revoked
	revokedAt          time.Time
	revokedSeq         int64 // the head read after the revocation committed
	arrivals           []arrival
	badSig             int
	faultResp          int64 // requests answered by a fault mode
}

// deviceRecord is one push device as the soak saw it.
type deviceRecord struct {
	name, principal string
	spaces          []string
	regID           uuid.UUID
	msgs            []pushMessage
	faultResp       int64
}

// logEvent is one row of event_log as the checks see it.
type logEvent struct {
	seq   int64
	id    uuid.UUID
	space string
	// about is the subscription an operational event (one bothy appended
	// itself, its type begins with webhooks.OperationalPrefix) is about;
	// uuid.Nil for the producers' events.
	about       uuid.UUID
	operational bool
}

// loadHistory gathers the history of the run: the harness's records,
// copied under their locks, and the database's final state. A table that
// cannot be read within readFor is recorded in unread.
func (h *harness) loadHistory(ctx context.Context, drained bool, drainTook time.Duration) *history {
	hi := &history{start: h.start, short: h.opts.short, drainTimeout: h.opts.drainTimeout, drained: drained,
		drainTook: drainTook, unread: map[string]error{}}
	if ok, why := h.pgCrashPlanned(); !ok {
		hi.crashSkipped = why
	}
	h.copyProducers(hi)
	h.copyReceivers(hi)
	h.copyFaults(hi)
	h.readDatabase(ctx, hi)
	return hi
}

// copyProducers copies what the producers were told.
func (h *harness) copyProducers(hi *history) {
	h.prodMu.Lock()
	defer h.prodMu.Unlock()
	hi.acked, hi.ackedHTTP = maps.Clone(h.acked), h.ackedHTTP
	hi.doubt, hi.rolledBack = maps.Clone(h.doubt), maps.Clone(h.rolledBack)
	hi.rbBefore, hi.rbAtCommit = h.rbBefore, h.rbAtCommit
	hi.crashes = slices.Clone(h.crashes)
}

// copyReceivers copies what the receivers saw and the revocations.
func (h *harness) copyReceivers(hi *history) {
	h.procMu.Lock()
	targets := slices.Clone(h.targets)
	hi.pushRevoked, hi.pushRevokedSeq = h.pushRevoked, h.pushRevokedSeq
	hi.procsStarted = len(h.allProcs)
	h.procMu.Unlock()
	for _, t := range targets {
		r := targetRecord{name: t.name, space: t.space, owner: t.owner, id: t.id, faultResp: t.faultResp.Load()}
		t.mu.Lock()
		r.resumes = slices.Clone(t.resumes)
		r.revoked, r.revokedAt, r.revokedSeq = t.revoked, t.revokedAt, t.revokedSeq
		t.mu.Unlock()
		r.arrivals, r.badSig = t.snapshot()
		hi.targets = append(hi.targets, r)
	}
	for _, d := range h.devices {
		hi.devices = append(hi.devices, deviceRecord{name: d.name, principal: d.principal, spaces: d.spaces, regID: d.regID,
			msgs: h.pr.messages(d.name), faultResp: d.faultResp.Load()})
	}
	hi.pushErrors = h.pr.rcv.Errors()
	h.pr.mu.Lock()
	hi.pushBadJSON = h.pr.badJSON
	h.pr.mu.Unlock()
}

// copyFaults copies the faults, the process problems and the harness
// errors.
func (h *harness) copyFaults(hi *history) {
	hi.faults = h.faultMu.snapshot()
	h.faultLogMu.Lock()
	hi.faultLog = slices.Clone(h.faultLog)
	hi.takeovers = slices.Clone(h.takeovers)
	hi.freezes = slices.Clone(h.freezes)
	h.faultLogMu.Unlock()
	h.notesMu.Lock()
	hi.problems = slices.Clone(h.problems)
	hi.harnessErrs = slices.Clone(h.harnessErrs)
	h.notesMu.Unlock()
}

// readFor bounds the reading of one table, retries included.
const readFor = time.Minute

// readDatabase reads the database's final state, each table on its own:
// one that cannot be read leaves the others' checks running.
func (h *harness) readDatabase(ctx context.Context, hi *history) {
	read := func(table string, fn func(ctx context.Context) error) {
		if err := h.query(ctx, readFor, fn); err != nil {
			hi.unread[table] = err
		}
	}
	read(tableEventLog, func(ctx context.Context) (err error) { hi.head, hi.events, err = h.readEventLog(ctx); return err })
	read(tableCursors, func(ctx context.Context) (err error) { hi.cursors, err = h.readCursors(ctx); return err })
	read(tableSubs, func(ctx context.Context) (err error) { hi.subStatus, err = h.subscriptionStatus(ctx); return err })
	read(tableDelivery, func(ctx context.Context) (err error) { hi.deliveries, err = h.deliveryRows(ctx); return err })
	read(tableWHJobs, func(ctx context.Context) (err error) {
		hi.dupDeliveryJobs, err = h.duplicateDeliveryJobs(ctx)
		return err
	})
	read(tablePushJobs, func(ctx context.Context) (err error) { hi.pushJobs, err = h.pushJobs(ctx); return err })
	read(tablePushSends, func(ctx context.Context) (err error) { hi.pushSends, err = h.pushSends(ctx); return err })
}

// readEventLog reads the head of the sequence and every event in the log,
// in seq order.
func (h *harness) readEventLog(ctx context.Context) (int64, []logEvent, error) {
	var head int64
	if err := h.pool.QueryRow(ctx, `SELECT last_seq FROM event_seq`).Scan(&head); err != nil {
		return 0, nil, err
	}
	rows, err := h.pool.Query(ctx, `
SELECT seq, id, space, starts_with(type, $1),
       coalesce(CASE WHEN starts_with(type, $1) THEN (data->>'subscription_id')::uuid END, $2)
FROM event_log ORDER BY seq`, webhooks.OperationalPrefix, uuid.Nil)
	if err != nil {
		return 0, nil, err
	}
	var events []logEvent
	var e logEvent
	_, err = pgx.ForEachRow(rows, []any{&e.seq, &e.id, &e.space, &e.operational, &e.about}, func() error {
		events = append(events, e)
		return nil
	})
	return head, events, err
}

// readCursors reads every consumer's cursor.
func (h *harness) readCursors(ctx context.Context) ([]cursorRow, error) {
	rows, err := h.pool.Query(ctx, `SELECT name, last_seq FROM event_consumer_cursors ORDER BY name`)
	if err != nil {
		return nil, err
	}
	var out []cursorRow
	var c cursorRow
	_, err = pgx.ForEachRow(rows, []any{&c.name, &c.last}, func() error {
		out = append(out, c)
		return nil
	})
	return out, err
}

// subscriptionStatus reads every subscription's status.
func (h *harness) subscriptionStatus(ctx context.Context) (map[uuid.UUID]string, error) {
	rows, err := h.pool.Query(ctx, `SELECT id, status FROM webhook_subscriptions`)
	if err != nil {
		return nil, err
	}
	status := map[uuid.UUID]string{}
	var id uuid.UUID
	var st string
	_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error {
		status[id] = st
		return nil
	})
	return status, err
}

// deliveryRows reads every subscription's delivery rows, in seq order.
func (h *harness) deliveryRows(ctx context.Context) (map[uuid.UUID][]deliveryRow, error) {
	rows, err := h.pool.Query(ctx, `SELECT subscription_id, event_seq, status FROM webhook_deliveries ORDER BY subscription_id, event_seq`)
	if err != nil {
		return nil, err
	}
	dels := map[uuid.UUID][]deliveryRow{}
	var id uuid.UUID
	var d deliveryRow
	_, err = pgx.ForEachRow(rows, []any{&id, &d.seq, &d.status}, func() error {
		dels[id] = append(dels[id], d)
		return nil
	})
	return dels, err
}

// duplicateDeliveryJobs counts each subscription's delivery jobs beyond
// one per seq.
func (h *harness) duplicateDeliveryJobs(ctx context.Context) (map[uuid.UUID]int, error) {
	rows, err := h.pool.Query(ctx, `
SELECT (args->>'subscription_id')::uuid, count(*) - 1 FROM river_job WHERE kind = $1
GROUP BY args->>'subscription_id', args->>'seq' HAVING count(*) > 1`, webhooks.KindDeliver)
	if err != nil {
		return nil, err
	}
	dups := map[uuid.UUID]int{}
	var id uuid.UUID
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		dups[id] += n
		return nil
	})
	return dups, err
}

// pushJobs reads every push.deliver job and lists it under each of its
// messages, by registration and seq: a batch job once per event and device
// it names, a job of one device (made before batching) once.
func (h *harness) pushJobs(ctx context.Context) (map[uuid.UUID]map[int64][]pushJob, error) {
	rows, err := h.pool.Query(ctx, `SELECT id, state, args FROM river_job WHERE kind = 'push.deliver'`)
	if err != nil {
		return nil, err
	}
	jobs := map[uuid.UUID]map[int64][]pushJob{}
	add := func(reg uuid.UUID, seq int64, j pushJob) {
		if jobs[reg] == nil {
			jobs[reg] = map[int64][]pushJob{}
		}
		jobs[reg][seq] = append(jobs[reg][seq], j)
	}
	var j pushJob
	var raw []byte
	_, err = pgx.ForEachRow(rows, []any{&j.id, &j.state, &raw}, func() error {
		var args push.DeliverArgs
		if err := json.Unmarshal(raw, &args); err != nil {
			return fmt.Errorf("push.deliver job %d: %w", j.id, err)
		}
		if len(args.Events) == 0 {
			add(args.RegistrationID, args.Seq, j)
			return nil
		}
		for _, ev := range args.Events {
			for _, d := range ev.Devices {
				add(d.RegistrationID, ev.Seq, j)
			}
		}
		return nil
	})
	return jobs, err
}

// pushSends reads the final answers recorded in push_sends, by
// registration and seq.
func (h *harness) pushSends(ctx context.Context) (map[uuid.UUID]map[int64]int16, error) {
	rows, err := h.pool.Query(ctx, `SELECT registration_id, event_seq, status FROM push_sends`)
	if err != nil {
		return nil, err
	}
	sends := map[uuid.UUID]map[int64]int16{}
	var reg uuid.UUID
	var seq int64
	var status int16
	_, err = pgx.ForEachRow(rows, []any{&reg, &seq, &status}, func() error {
		if sends[reg] == nil {
			sends[reg] = map[int64]int16{}
		}
		sends[reg][seq] = status
		return nil
	})
	return sends, err
}
