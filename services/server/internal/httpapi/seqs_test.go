package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/httpapi"
	"github.com/bothy/bothy/services/server/internal/page"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// highSeqs are where a seq stops fitting in an int4 and where it stops
// being exact in a float64.
var highSeqs = []int64{1 << 31, 1 << 53}

// decode reads r's JSON body into out, numbers as their Go types: a seq
// past 2^53 read as a float64 would be another seq.
func (r *response) decode(t *testing.T, out any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, out), "body: %s", r.body)
}

type eventsPageBody struct {
	Events []struct {
		Seq int64 `json:"seq"`
	} `json:"events"`
	NextCursor string `json:"next_cursor"`
	Done       bool   `json:"done"`
}

func (p *eventsPageBody) seqs() []int64 {
	out := []int64{}
	for _, e := range p.Events {
		out = append(out, e.Seq)
	}
	return out
}

// TestAPI_SeqsBeyondInt4 runs a log whose seqs start at 2^31 (past int4)
// and at 2^53 (past the integers a float64 holds) through every route
// that takes a seq or a cursor made of one: the deliveries list and its
// next pages, one delivery, its resend, a recover by seqs, the pull by
// after and by cursor, the stream from Last-Event-ID and the consumers'
// cursors. Each answers what it would for small seqs.
func TestAPI_SeqsBeyondInt4(t *testing.T) {
	t.Parallel()
	for _, base := range highSeqs {
		t.Run(fmt.Sprint(base), func(t *testing.T) {
			t.Parallel()
			db := dbtest.NewDB(t)
			db.StartLogAt(t, base-1)
			b := &testBundle{db: db, base: startServer(t, db.URL, "all")}
			owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
			ops := b.principal(t, "ops", "", "", authz.ScopeOpsRead)
			rv := newIDReceiver(t)
			r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q}`, rv.srv.Base()))
			require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
			var sub struct {
				ID     string `json:"id"`
				Secret string `json:"secret"`
			}
			r.decode(t, &sub)
			rv.setSecret(t, sub.Secret)
			sp := "/v1/webhooks/" + sub.ID

			r = b.do(t, "POST", "/v1/spaces/s1/events", owner, `{"events":[{"type":"item.a"},{"type":"item.b"},{"type":"item.c"}]}`)
			require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
			var appended eventsPageBody
			r.decode(t, &appended)
			seqs := []int64{base, base + 1, base + 2}
			require.Equal(t, seqs, appended.seqs())
			require.Equal(t, seqs, seqsSent(rv.waitFor(t, 3)))

			t.Run("OneDelivery", func(t *testing.T) {
				var d webhooks.DeliveryView
				var last *response
				require.Eventually(t, func() bool {
					last = b.do(t, "GET", fmt.Sprintf("%s/deliveries/%d", sp, base+2), owner, "")
					return last.status == http.StatusOK && json.Unmarshal(last.body, &d) == nil && d.Status == webhooks.DeliveryDelivered
				}, 30*time.Second, 10*time.Millisecond, "the delivery is recorded as delivered")
				require.Equal(t, http.StatusOK, last.status, "%s", last.body)
				require.Equal(t, base+2, d.Seq)
				require.NotNil(t, d.AttemptList)
				require.Len(t, *d.AttemptList, 1)
				for _, seq := range []string{fmt.Sprint(base + 3), "9223372036854775807", "9223372036854775808"} {
					b.do(t, "GET", sp+"/deliveries/"+seq, owner, "").problem(t, http.StatusNotFound)
				}
			})

			t.Run("DeliveriesPageByPage", func(t *testing.T) {
				var got []int64
				path := sp + "/deliveries?limit=1"
				for range 4 {
					r := b.do(t, "GET", path, owner, "")
					require.Equal(t, http.StatusOK, r.status, "%s", r.body)
					var pg webhooks.DeliveriesPage
					r.decode(t, &pg)
					for _, d := range pg.Deliveries {
						got = append(got, d.Seq)
					}
					if pg.NextCursor == "" {
						break
					}
					path = sp + "/deliveries?limit=1&cursor=" + url.QueryEscape(pg.NextCursor)
				}
				require.Equal(t, []int64{base + 2, base + 1, base}, got)
			})

			t.Run("PullByAfterAndByCursor", func(t *testing.T) {
				r := b.do(t, "GET", fmt.Sprintf("/v1/spaces/s1/events?after=%d&limit=2", base-1), owner, "")
				require.Equal(t, http.StatusOK, r.status, "%s", r.body)
				var pg eventsPageBody
				r.decode(t, &pg)
				require.Equal(t, seqs[:2], pg.seqs())
				r = b.do(t, "GET", "/v1/spaces/s1/events?cursor="+url.QueryEscape(pg.NextCursor), owner, "")
				require.Equal(t, http.StatusOK, r.status, "%s", r.body)
				pg = eventsPageBody{}
				r.decode(t, &pg)
				require.Equal(t, seqs[2:], pg.seqs())
				require.True(t, pg.Done)
			})

			t.Run("StreamFromLastEventID", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				st := (&pullBundle{testBundle: b}).openStream(t, ctx, owner, "", strconv.FormatInt(base, 10))
				for _, want := range seqs[1:] {
					require.Equal(t, strconv.FormatInt(want, 10), st.nextEvent(t).id)
				}
			})

			t.Run("ConsumersCursors", func(t *testing.T) {
				require.Eventually(t, func() bool {
					for _, c := range b.consumers(t, ops).Consumers {
						if c.Name == "webhooks" && c.LastSeq == base+2 && c.Head == base+2 && c.Lag == 0 {
							return true
						}
					}
					return false
				}, 30*time.Second, 10*time.Millisecond)
			})

			t.Run("ResendAndRecover", func(t *testing.T) {
				r := b.do(t, "POST", fmt.Sprintf("%s/deliveries/%d/resend", sp, base+1), owner, "")
				require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
				var d webhooks.DeliveryView
				r.decode(t, &d)
				require.Equal(t, base+1, d.Seq)
				require.Equal(t, base+1, rv.waitFor(t, 4)[3].seq)

				r = b.do(t, "POST", sp+"/recover", owner, fmt.Sprintf(`{"from_seq":%d,"to_seq":%d}`, base, base+2))
				require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
				var rec webhooks.RecoverView
				r.decode(t, &rec)
				require.NotNil(t, rec.Range)
				require.Equal(t, webhooks.SeqRangeView{From: base, To: base + 2}, *rec.Range)
			})
		})
	}
}

// TestAPI_OutOfRangeNumbersAre400: a position, cursor or wait that names a
// number its arithmetic cannot hold is a 400 naming the parameter, not a
// 500 or a different number; the largest valid position is an empty page.
func TestAPI_OutOfRangeNumbersAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	r := b.do(t, "POST", "/v1/spaces/s1/events", owner, `{"events":[{"type":"item.a"}]}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	events := func(query string) *response {
		return b.do(t, "GET", "/v1/spaces/s1/events?"+query, owner, "")
	}

	t.Run("After", func(t *testing.T) {
		for _, v := range []string{"9223372036854775807", "9223372036854775808", "-1", "1e3"} {
			require.Contains(t, events("after="+v).problem(t, http.StatusBadRequest), "after", v)
		}
		r := events("after=9223372036854775806")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var pg eventsPageBody
		r.decode(t, &pg)
		require.Empty(t, pg.Events)
		require.True(t, pg.Done)
	})

	t.Run("EventsCursor", func(t *testing.T) {
		for _, seq := range []int64{math.MaxInt64, -1} {
			cur := page.Key{List: "events", Seq: seq}.Encode()
			require.Contains(t, events("cursor="+cur).problem(t, http.StatusBadRequest), "cursor", seq)
		}
		r := events("cursor=" + page.Key{List: "events", Seq: math.MaxInt64 - 1}.Encode())
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	})

	t.Run("DeliveriesCursor", func(t *testing.T) {
		r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q}`, newReceiver(t).srv.Base()))
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		var sub struct {
			ID uuid.UUID `json:"id"`
		}
		r.decode(t, &sub)
		cur := page.Key{List: "deliveries", ID: sub.ID, Seq: -1}.Encode()
		d := b.do(t, "GET", "/v1/webhooks/"+sub.ID.String()+"/deliveries?cursor="+cur, owner, "").problem(t, http.StatusBadRequest)
		require.Contains(t, d, "cursor")
	})

	t.Run("LastEventID", func(t *testing.T) {
		for _, v := range []string{"9223372036854775807", "9223372036854775808", "-1"} {
			req, err := http.NewRequest("GET", b.base+"/v1/spaces/s1/events", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+owner)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Last-Event-ID", v)
			require.Contains(t, send(t, req).problem(t, http.StatusBadRequest), "Last-Event-ID", v)
		}
	})

	t.Run("Wait", func(t *testing.T) {
		// There is an event after 0, so a wait the server took would
		// answer it at once.
		for _, v := range []string{"18446744133", "9223372037", "61", "61s", "-1", "2562047h"} {
			require.Contains(t, events("after=0&wait="+v).problem(t, http.StatusBadRequest), "wait", v)
		}
		for _, v := range []string{"60", "60s", "0"} {
			r := events("after=0&wait=" + v)
			require.Equal(t, http.StatusOK, r.status, "wait=%s: %s", v, r.body)
		}
	})
}

// TestAPI_EventStreamFromTheLargestPosition: a stream resuming after the
// largest seq a client may name reads nothing and keeps beating, instead
// of ending at its first read of the log.
func TestAPI_EventStreamFromTheLargestPosition(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := setupPull(t, httpapi.Config{EventsHeartbeat: 20 * time.Millisecond}, false)
	reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
	b.appendEvent(t, "s1", "item.created")
	st := b.openStream(t, ctx, reader, "", strconv.FormatInt(math.MaxInt64-1, 10))
	for range 2 {
		ev, err := st.next()
		require.NoError(t, err, "the stream ended")
		require.True(t, ev.comment)
		require.Empty(t, ev.data)
	}
}

// TestAPI_CraftedCursorsAre400: a cursor that decodes to a key the server
// never hands out, with a text PostgreSQL cannot store, is refused as a
// cursor instead of reaching the database.
func TestAPI_CraftedCursorsAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	op := b.principal(t, "op", authz.RightAdmin, "s1", operatorScopes...)
	for _, list := range []struct{ name, path string }{
		{"members", "/v1/spaces/s1/members"},
		{"event-types", "/v1/spaces/s1/event-types"},
		{"principals", "/v1/principals"},
	} {
		cur := page.Key{List: list.name, Name: "a\x00b"}.Encode()
		d := b.do(t, "GET", list.path+"?cursor="+cur, op, "").problem(t, http.StatusBadRequest)
		require.Contains(t, d, "cursor", list.path)
	}
}
