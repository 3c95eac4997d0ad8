package eventexpr_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/eventexpr"
)

func event(data string) *sync.Event {
	return &sync.Event{Seq: 7, ID: uuid.MustParse("0190d5e5-7d2e-7c8a-9b1e-2f4f8a0c1d2e"), Space: "shop", Type: "order.created",
		Actor: "alice", OccurredAt: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC), Data: json.RawMessage(data)}
}

func TestCompile_RefusesWithPosition(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		kind eventexpr.Kind
		src  string
		want string
	}{
		"SyntaxError":        {eventexpr.Filter, "type ==", "1:8: "},
		"UndeclaredVariable": {eventexpr.Filter, "type == 'a' &&\n  tenant == 'b'", "2:3: undeclared reference to 'tenant'"},
		"FilterNotABool":     {eventexpr.Filter, "seq + 1", "1:1: a filter must be a bool, this is a int"},
		"TransformNotAMap":   {eventexpr.Transform, "'body'", "1:1: a transform must be a map or a list, this is a string"},
		"TooLong":            {eventexpr.Filter, strings.Repeat(" ", eventexpr.MaxSourceBytes) + "true", "1:1: 4100 bytes, at most 4096"},
		"TooDeep":            {eventexpr.Filter, strings.Repeat("[", 40) + "true" + strings.Repeat("]", 40) + " == []", "1:"},
		"CheapestRunTooCostly": {eventexpr.Filter, "size([1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, a+b+c+d))))) > 0",
			"more than the limit of 10000"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := eventexpr.Compile(tc.kind, tc.src)
			var ce *eventexpr.Error
			require.ErrorAs(t, err, &ce)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestProgram_Match(t *testing.T) {
	t.Parallel()
	ev := event(`{"total": 150, "region": "eu", "items": [{"sku": "a"}, {"sku": "b"}]}`)
	for src, want := range map[string]bool{
		"type == 'order.created' && data.total > 100 && data.region == 'eu'": true,
		"data.total == 150":                               true,
		"data.items.exists(i, i.sku == 'b')":              true,
		"space == 'shop' && actor == 'alice' && seq == 7": true,
		"id == '0190d5e5-7d2e-7c8a-9b1e-2f4f8a0c1d2e'":    true,
		"occurred_at > timestamp('2026-01-01T00:00:00Z')": true,
		"type.startsWith('invoice.')":                     false,
		"has(data.coupon) && data.coupon == 'x'":          false,
	} {
		prg, err := eventexpr.Compile(eventexpr.Filter, src)
		require.NoError(t, err, src)
		got, err := prg.Match(eventexpr.NewInput(ev))
		require.NoError(t, err, src)
		require.Equal(t, want, got, src)
	}
}

func TestProgram_RunTimeErrors(t *testing.T) {
	t.Parallel()
	prg, err := eventexpr.Compile(eventexpr.Filter, "data.missing > 1")
	require.NoError(t, err)
	_, err = prg.Match(eventexpr.NewInput(event(`{}`)))
	require.ErrorContains(t, err, "filter: no such key: missing")

	prg, err = eventexpr.Compile(eventexpr.Filter, "data.items.all(x, data.items.all(y, x + y >= 0.0))")
	require.NoError(t, err, "its cost depends on the event: accepted")
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	_, err = prg.Match(eventexpr.NewInput(event(`{"items": [` + strings.Join(items, ",") + `]}`)))
	require.ErrorIs(t, err, eventexpr.ErrCostLimit, "a million iterations are stopped")

	prg, err = eventexpr.Compile(eventexpr.Filter, "data.v")
	require.NoError(t, err, "dyn: known at run time")
	_, err = prg.Match(eventexpr.NewInput(event(`{"v": 3}`)))
	require.ErrorContains(t, err, "not a bool")
}

func TestProgram_Body(t *testing.T) {
	t.Parallel()
	ev := event(`{"total": 150.5, "lines": [1, 2], "note": null}`)
	prg, err := eventexpr.Compile(eventexpr.Transform, "{'id': id, 'kind': type, 'total': data.total, 'n': size(data.lines), 'when': string(occurred_at), 'note': data.note}")
	require.NoError(t, err)
	body, err := prg.Body(eventexpr.NewInput(ev))
	require.NoError(t, err)
	require.JSONEq(t, `{"id": "0190d5e5-7d2e-7c8a-9b1e-2f4f8a0c1d2e", "kind": "order.created", "total": 150.5, "n": 2,
		"when": "2026-12-05T10:00:00Z", "note": null}`, string(body))

	prg, err = eventexpr.Compile(eventexpr.Transform, "data.lines.map(x, {'line': x})")
	require.NoError(t, err)
	body, err = prg.Body(eventexpr.NewInput(ev))
	require.NoError(t, err)
	require.JSONEq(t, `[{"line": 1}, {"line": 2}]`, string(body))

	prg, err = eventexpr.Compile(eventexpr.Transform, "data.total")
	require.NoError(t, err)
	_, err = prg.Body(eventexpr.NewInput(ev))
	require.ErrorContains(t, err, "not a map or a list")
}

func TestCache_RecompilesAChangedExpression(t *testing.T) {
	t.Parallel()
	c := eventexpr.NewCache()
	id := uuid.New()
	a, err := c.Program(id, eventexpr.Filter, "true")
	require.NoError(t, err)
	again, err := c.Program(id, eventexpr.Filter, "true")
	require.NoError(t, err)
	require.Same(t, a, again, "compiled once per expression text")
	b, err := c.Program(id, eventexpr.Filter, "false")
	require.NoError(t, err)
	require.Equal(t, "false", b.Source())
	_, err = c.Program(id, eventexpr.Filter, "nope")
	require.Error(t, err)
}

// oneKB is an event of about 1 KB of data, as an order.
func oneKB() *sync.Event {
	lines := make([]string, 8)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"sku": "SKU-%04d", "name": "Item number %d of the order", "qty": %d, "price": %d.95}`, i, i, i+1, 10+i)
	}
	data := fmt.Sprintf(`{"order_id": "ord_0190d5e57d2e", "total": 254.6, "currency": "EUR", "region": "eu", "customer": {"id": "cus_42", "email": "someone@example.com", "tier": "gold"}, "lines": [%s]}`,
		strings.Join(lines, ", "))
	return event(data)
}

// BenchmarkFilter_1KBEvent is one filter evaluation on a 1 KB event, as a
// round makes it: the event's data decoded once (it is shared by every
// filter that reads the event; BenchmarkFilter_1KBEventDecoded counts the
// decoding too).
func BenchmarkFilter_1KBEvent(b *testing.B) {
	ev := oneKB()
	require.InDelta(b, 1024, len(ev.Data), 200)
	prg, err := eventexpr.Compile(eventexpr.Filter, "type == 'order.created' && data.total > 100 && data.region == 'eu'")
	require.NoError(b, err)
	in := eventexpr.NewInput(ev)
	ok, err := prg.Match(in)
	require.NoError(b, err)
	require.True(b, ok)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := prg.Match(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFilter_1KBEventDecoded is BenchmarkFilter_1KBEvent with the
// event's data decoded for each evaluation: a filter alone on its event.
func BenchmarkFilter_1KBEventDecoded(b *testing.B) {
	ev := oneKB()
	prg, err := eventexpr.Compile(eventexpr.Filter, "type == 'order.created' && data.total > 100 && data.region == 'eu'")
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := prg.Match(eventexpr.NewInput(ev)); err != nil {
			b.Fatal(err)
		}
	}
}
