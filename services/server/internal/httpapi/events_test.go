package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// head is the log's newest seq.
func (b *testBundle) head(t *testing.T) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT last_seq FROM event_seq`).Scan(&seq))
	return seq
}

func (b *testBundle) rowsWithID(t *testing.T, id string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM event_log WHERE id = $1`, id).Scan(&n))
	return n
}

func eventsOf(t *testing.T, r *response) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range r.json(t)["events"].([]any) {
		out = append(out, e.(map[string]any))
	}
	return out
}

// TestAPI_AppendEventsIdempotent shows that an event id is appended once
// through POST /v1/spaces/{space}/events: a repeat in the same request or a
// later one is answered 201 with the logged event (its original seq) marked
// "duplicate", a webhook receiver gets it once, and an id reused for a
// different event is 409 without showing that event.
func TestAPI_AppendEventsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writer := b.principal(t, "writer", authz.RightWrite, "s1", authz.ScopeEventsRead, authz.ScopeEventsWrite, authz.ScopeWebhooksManage)
	other := b.principal(t, "other", authz.RightWrite, "s1", authz.ScopeEventsWrite)
	const path = "/v1/spaces/s1/events"

	t.Run("SameIDTwiceInOneRequestIsAppendedOnce", func(t *testing.T) {
		const id = "0199c0de-0000-7000-8000-000000000001"
		r := b.do(t, "POST", path, writer, `{"events":[{"id":"`+id+`","type":"item.created","data":{"n":1}},{"type":"item.updated"},{"id":"`+id+`","type":"item.created","data":{"n":1.0}}]}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		evs := eventsOf(t, r)
		require.Len(t, evs, 3)
		require.NotContains(t, evs[0], "duplicate")
		require.NotContains(t, evs[1], "duplicate")
		require.Equal(t, true, evs[2]["duplicate"])
		require.Equal(t, evs[0]["seq"], evs[2]["seq"])
		require.Equal(t, evs[0]["seq"].(float64)+1, evs[1]["seq"], "the repeat takes no seq")
		require.Equal(t, 1, b.rowsWithID(t, id))
	})
	t.Run("SameIDInTwoRequestsIsAppendedOnce", func(t *testing.T) {
		const id = "0199c0de-0000-7000-8000-000000000002"
		body := `{"events":[{"id":"` + id + `","type":"item.created","data":{"n":2}}]}`
		first := b.do(t, "POST", path, writer, body)
		require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
		again := b.do(t, "POST", path, writer, body)
		require.Equal(t, http.StatusCreated, again.status, "%s", again.body)
		e0, e1 := eventsOf(t, first)[0], eventsOf(t, again)[0]
		require.Equal(t, true, e1["duplicate"])
		delete(e1, "duplicate")
		require.Equal(t, e0, e1, "the retry gets the first answer's event, occurred_at included")
		require.Equal(t, 1, b.rowsWithID(t, id))
	})
	t.Run("RepeatedIDIsDeliveredOnce", func(t *testing.T) {
		rv := newReceiver(t)
		r := b.do(t, "POST", "/v1/webhooks", writer, fmt.Sprintf(`{"space":"s1","url":%q,"event_types":["hook.*"]}`, rv.srv.Base()))
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		rv.setSecret(t, r.json(t)["secret"].(string))
		body := `{"events":[{"id":"0199c0de-0000-7000-8000-000000000003","type":"hook.created"}]}`
		require.Equal(t, http.StatusCreated, b.do(t, "POST", path, writer, body).status)
		require.Equal(t, http.StatusCreated, b.do(t, "POST", path, writer, body).status)
		require.Equal(t, http.StatusCreated, b.do(t, "POST", path, writer, `{"events":[{"type":"hook.last"}]}`).status)
		got := rv.waitFor(t, 2) // deliveries keep seq order: the marker comes after any copy
		require.Equal(t, "hook.created", got[0]["type"])
		require.Equal(t, "hook.last", got[1]["type"], "no second delivery of the repeated id")
	})
	t.Run("SameIDForAnotherEventIs409", func(t *testing.T) {
		const id = "0199c0de-0000-7000-8000-000000000004"
		r := b.do(t, "POST", path, writer, `{"events":[{"id":"`+id+`","type":"item.created","data":{"secret":"s3cr3t"}}]}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		before := b.head(t)
		for name, tc := range map[string]struct{ token, body string }{
			"OtherData":      {writer, `{"events":[{"type":"item.created"},{"id":"` + id + `","type":"item.created","data":{"secret":"other"}}]}`},
			"OtherType":      {writer, `{"events":[{"type":"item.created"},{"id":"` + id + `","type":"item.deleted","data":{"secret":"s3cr3t"}}]}`},
			"OtherPrincipal": {other, `{"events":[{"type":"item.created"},{"id":"` + id + `","type":"item.created","data":{"secret":"s3cr3t"}}]}`},
		} {
			r := b.do(t, "POST", path, tc.token, tc.body)
			detail := r.problem(t, http.StatusConflict)
			require.Contains(t, detail, "events[1].id", name)
			require.Equal(t, "/v1/problems/id-reused", r.json(t)["type"], name)
			require.NotContains(t, string(r.body), "s3cr3t", "%s: the logged event is not shown", name)
			require.NotContains(t, string(r.body), `"writer"`, name)
		}
		require.Equal(t, before, b.head(t), "nothing appended")
		within := b.do(t, "POST", path, writer, `{"events":[{"id":"0199c0de-0000-7000-8000-000000000005","type":"item.created"},{"id":"0199c0de-0000-7000-8000-000000000005","type":"item.updated"}]}`)
		require.Contains(t, within.problem(t, http.StatusConflict), "events[1].id")
		require.Equal(t, before, b.head(t), "nothing appended")
	})
}

// TestAPI_AppendEventsRefusesWhatPostgreSQLCannotStore sends, through the
// real server, input that once reached PostgreSQL and came back as a 500:
// each is now a 4xx problem naming the field, and nothing is appended.
func TestAPI_AppendEventsRefusesWhatPostgreSQLCannotStore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writer := b.principal(t, "writer", authz.RightAdmin, "s1", authz.ScopeEventsWrite)
	deep := strings.Repeat(`{"a":`, 300) + "1" + strings.Repeat("}", 300)
	for _, tc := range []struct {
		name   string
		path   string
		body   string
		status int
		want   []string
	}{
		// Text PostgreSQL cannot store is refused at the edge, for every
		// string of the body (TestAPI_EveryRouteRefusesBadTextWith4xx).
		{"NULInDataString", "/v1/spaces/s1/events", `{"events":[{"type":"item.created","data":{"note":"a\u0000b"}}]}`,
			400, []string{`request body: a string contains \u0000, which PostgreSQL cannot store (at "/events/0/data/note")`}},
		{"NULInDataKey", "/v1/spaces/s1/events", `{"events":[{"type":"item.created"},{"type":"item.created","data":{"a\u0000":1}}]}`,
			400, []string{`a key contains \u0000`, `"/events/1/data"`}},
		{"LoneSurrogateInData", "/v1/spaces/s1/events", `{"events":[{"type":"item.created","data":{"x":["\ud800"]}}]}`,
			400, []string{`lone UTF-16 surrogate (\ud800)`, `"/events/0/data/x/0"`}},
		{"InvalidUTF8InData", "/v1/spaces/s1/events", "{\"events\":[{\"type\":\"item.created\",\"data\":{\"x\":\"\xff\xfe\"}}]}",
			400, []string{"not valid UTF-8", `"/events/0/data/x"`}},
		{"NumberBeyondNumeric", "/v1/spaces/s1/events", `{"events":[{"type":"item.created","data":{"n":1e131072}}]}`,
			422, []string{"events[0].data", "numeric"}},
		{"NestedTooDeep", "/v1/spaces/s1/events", `{"events":[{"type":"item.created","data":` + deep + `}]}`,
			422, []string{"events[0].data", "deeper than 256"}},
		{"OccurredBeforeYear0InUTC", "/v1/spaces/s1/events", `{"events":[{"type":"item.created","occurred_at":"0000-01-01T00:00:00+01:00"}]}`,
			422, []string{"events[0].occurred_at"}},
		{"NULInSpacePath", "/v1/spaces/s%00/events", `{"events":[{"type":"item.created"}]}`,
			400, []string{`path parameter "space": contains a NUL character`}},
		{"InvalidUTF8InSpacePath", "/v1/spaces/%ff/events", `{"events":[{"type":"item.created"}]}`,
			400, []string{`path parameter "space": is not valid UTF-8`}},
		{"SpaceInThePathThatCannotBeASpace", "/v1/spaces/a%20b/events", `{"events":[{"type":"item.created"}]}`,
			403, []string{`space in the path: "a b"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.head(t)
			detail := b.do(t, "POST", tc.path, writer, tc.body).problem(t, tc.status)
			for _, w := range tc.want {
				require.Contains(t, detail, w)
			}
			require.Equal(t, before, b.head(t), "nothing appended")
		})
	}
}
