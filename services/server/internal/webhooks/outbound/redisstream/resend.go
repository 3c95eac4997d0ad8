package redisstream

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// resentField is the entry field that marks a resend: the time the owner
// asked for it (RFC 3339, UTC).
const resentField = "resent"

// Where resendID looks for a resend's own entry: back from the stream's
// end, a page at a time, at most resendLookback entries.
const (
	resendPage     = 32
	resendLookback = 256
)

// resend says whether m is a resend of an event's message.
func resend(m *outbound.Message) bool { return !m.Resent.IsZero() && m.LastSeq > 0 }

// resentValue is the resent field of resend m's entry.
func resentValue(m *outbound.Message) string { return m.Resent.UTC().Format(time.RFC3339Nano) }

// resendID places resend m. Its first entry (at "<LastSeq>-0", or another
// resend's) is at or below the stream's last id, which Redis does not add
// below, so a resend goes after the last entry whose id is at or past m's
// seq, under that entry's seq with the next free sequence part
// ("<seq>-*"), or at its own seq if the stream has not reached it: it
// never moves the stream past a seq still to come. A repeat of the resend
// (an attempt again after a lost answer or a crash) is not added again
// when its entry (m's id and resent fields) is among the last
// resendLookback entries at or past m's seq: held is then that entry's id.
// Further back it is added again, a repeat that consumers deduplicate by
// webhook-id.
func resendID(ctx context.Context, cl *redis.Client, key string, m *outbound.Message, args *redis.XAddArgs) (held string, err error) {
	low, want := entryID(m.LastSeq), resentValue(m)
	args.ID = strconv.FormatInt(m.LastSeq, 10) + "-*"
	top := "+"
	for seen := 0; seen < resendLookback; seen += resendPage {
		entries, err := cl.XRevRangeN(ctx, key, top, low, resendPage).Result()
		if err != nil {
			return "", err
		}
		if len(entries) > 0 && top == "+" {
			last, _ := entrySeq(entries[0].ID)
			args.ID = strconv.FormatInt(last, 10) + "-*"
		}
		for _, e := range entries {
			id, _ := e.Values["id"].(string)
			at, _ := e.Values[resentField].(string)
			if id == m.ID && at == want {
				return e.ID, nil
			}
		}
		if len(entries) < resendPage {
			break
		}
		top = "(" + entries[len(entries)-1].ID
	}
	return "", nil
}
