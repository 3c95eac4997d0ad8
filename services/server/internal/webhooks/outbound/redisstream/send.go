package redisstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// destination adds one subscription's messages to its stream.
type destination struct {
	cfg    Config
	target *outbound.Target
	pool   *Pool
	key    broker.Key
	// unanswered carries the commands of a noConfirm destination to the
	// goroutine that sends them in order without reading the answers.
	unanswered     chan *redis.XAddArgs
	unansweredOnce gosync.Once
}

// Send adds m to the stream its space and type name, as entry
// "<LastSeq>-0", and answers Delivered once Redis answered with the
// entry's id. Redis refuses an id at or below the stream's last one; Send
// then reads the entry at or after "<Seq>-0", and m counts as Delivered
// if that entry is m (its id field) or holds m's seqs (a batch that
// carried them): a repeat, not stored twice. Otherwise m cannot be added
// in order and the answer is Retry saying so. A message without seqs (a
// test send) goes in after the stream's last entry, under the same seq;
// a resend goes in after the stream's last entry too (resendID), unless
// the stream already holds that very resend, and is Retry if another
// writer added after the entry it read.
func (d *destination) Send(ctx context.Context, m *outbound.Message, ts time.Time) outbound.Answer {
	key := d.cfg.key.Render(m.Space, m.Type)
	h, err := outbound.Signed(d.target, m, ts)
	if err != nil {
		return retry("%s", err)
	}
	cn, release, err := d.pool.conns.Acquire(ctx, d.key, d.pool.dial(d.cfg))
	if err != nil {
		return retry("%s", err)
	}
	defer release()
	cl := cn.client
	args := &redis.XAddArgs{Stream: key, Values: fields(m, h), MaxLen: d.cfg.MaxLen, Approx: d.cfg.MaxLen > 0}
	switch {
	case m.LastSeq <= 0:
		top, err := lastEntry(ctx, cl, key)
		if err != nil {
			return d.failed(key, err)
		}
		args.ID = strconv.FormatUint(top, 10) + "-*"
	case resend(m):
		held, err := resendID(ctx, cl, key, m, args)
		if err != nil {
			return d.failed(key, err)
		}
		if held != "" {
			return outbound.Answer{Kind: outbound.Delivered,
				Excerpt: fmt.Sprintf("a repeat: entry %s of stream %q already holds this resend", held, key)}
		}
	default:
		args.ID = entryID(m.LastSeq)
	}
	if d.pool.noConfirm {
		d.sendUnanswered(cl, args)
		return outbound.Answer{Kind: outbound.Delivered}
	}
	id, err := cl.XAdd(ctx, args).Result()
	switch {
	case err == nil:
		return outbound.Answer{Kind: outbound.Delivered, Excerpt: fmt.Sprintf("entry %s of stream %q", id, key)}
	case m.LastSeq > 0 && !resend(m) && redis.HasErrorPrefix(err, "The ID specified in XADD is equal or smaller"):
		return d.repeat(ctx, cl, key, m)
	}
	return d.failed(key, err)
}

// sendUnanswered hands args to a goroutine that adds entries in order and
// reads no answer: a destination without Redis' confirmation, for the
// test that shows the conformance suite fails without it.
func (d *destination) sendUnanswered(cl *redis.Client, args *redis.XAddArgs) {
	d.unansweredOnce.Do(func() {
		d.unanswered = make(chan *redis.XAddArgs, 1024)
		go func() {
			for a := range d.unanswered {
				cl.XAdd(context.Background(), a)
			}
		}()
	})
	d.unanswered <- args
}

// repeat answers for m, which Redis refused because the stream's last id
// is at or past m's entry id.
func (d *destination) repeat(ctx context.Context, cl *redis.Client, key string, m *outbound.Message) outbound.Answer {
	entries, err := cl.XRangeN(ctx, key, entryID(m.Seq), "+", 1).Result()
	if err != nil {
		return d.failed(key, err)
	}
	if len(entries) == 1 && holds(entries[0], m) {
		return outbound.Answer{Kind: outbound.Delivered,
			Excerpt: fmt.Sprintf("a repeat: entry %s of stream %q already holds it", entries[0].ID, key)}
	}
	return retry("stream %q on %s is already past entry id %s and does not hold seqs %d to %d: Redis adds entries only after the last one "+
		"(a stream key takes one ordered subscription's messages; an entry trimmed by maxlen or deleted does not come back)",
		key, d.key.Addr, entryID(m.LastSeq), m.Seq, m.LastSeq)
}

// holds says whether entry e is m, or a batch whose seqs include m's. A
// resend's entry holds its own message only: its id is not its seqs'.
func holds(e redis.XMessage, m *outbound.Message) bool {
	if id, _ := e.Values["id"].(string); id == m.ID {
		return true
	}
	if _, ok := e.Values[resentField]; ok {
		return false
	}
	last, ok := entrySeq(e.ID)
	first, err := strconv.ParseInt(fmt.Sprint(e.Values["seq"]), 10, 64)
	return ok && err == nil && first > 0 && first <= m.Seq && m.LastSeq <= last
}

// lastEntry is the seq part of the stream's last entry id, 0 for an
// empty or missing stream.
func lastEntry(ctx context.Context, cl *redis.Client, key string) (uint64, error) {
	entries, err := cl.XRevRangeN(ctx, key, "+", "-", 1).Result()
	if err != nil || len(entries) == 0 {
		return 0, err
	}
	ms, _, _ := strings.Cut(entries[0].ID, "-")
	return strconv.ParseUint(ms, 10, 64)
}

// failed is the Retry of a command that failed for another reason than
// the entry id: Redis' refusal (a key of another type, no permission, out
// of memory), no answer in time, or no connection.
func (d *destination) failed(key string, err error) outbound.Answer {
	var rerr redis.Error
	switch {
	case errors.As(err, &rerr):
		return retry("Redis on %s refused stream %q: %s", d.key.Addr, key, rerr.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return retry("no answer from Redis on %s for stream %q within the attempt's time", d.key.Addr, key)
	}
	return retry("Redis on %s, stream %q: %s", d.key.Addr, key, err)
}

// entryID is the stream entry id of the message whose last seq is seq.
func entryID(seq int64) string { return strconv.FormatInt(seq, 10) + "-0" }

// entrySeq is the seq an entry id was made of.
func entrySeq(id string) (int64, bool) {
	ms, _, ok := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	return n, ok && err == nil
}

// fields are an entry's: id, seq (the first event's), body, resent for a
// resend, then the signature headers under their names, sorted.
func fields(m *outbound.Message, h map[string]string) []any {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]any, 0, 8+2*len(names))
	out = append(out, "id", m.ID, "seq", strconv.FormatInt(m.Seq, 10), "body", m.Body)
	if resend(m) {
		out = append(out, resentField, resentValue(m))
	}
	for _, name := range names {
		out = append(out, name, h[name])
	}
	return out
}

func retry(format string, args ...any) outbound.Answer {
	return outbound.Answer{Kind: outbound.Retry, Err: fmt.Sprintf(format, args...)}
}
