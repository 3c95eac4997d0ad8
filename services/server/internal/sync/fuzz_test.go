package sync

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// FuzzNewEventNormalize normalizes fuzzed events: it must never panic, and
// an accepted event must hold every rule a consumer relies on (an id, a
// time RFC 3339 can write, data that is a JSON object within the limit
// with UTF-8 text and no NUL, names that match). FuzzEventLogWrite, in the
// PostgreSQL adapter, checks that the log stores what Normalize accepts.
func FuzzNewEventNormalize(f *testing.F) {
	f.Add("space-1", "item.created", "alice", []byte(`{"a":1}`), int64(0))
	f.Add("", "", "", []byte(nil), int64(-1))
	f.Add("s", "Item.Created", "a b", []byte(`[1,2]`), int64(1))
	f.Add("s", "item", "a", []byte(`null`), int64(1700000000))
	f.Add("s", "item.created", "a", []byte(`{"a":`), int64(0))
	f.Add("s\x00", "item.created\n", "a", []byte(`{}`+"\n"), int64(0))
	f.Add("s", "item.created", "a", bytes.Repeat([]byte(" "), MaxEventData+1), int64(0))
	f.Add("s", "item.created", "a", []byte(`{"a":"\u0000","\ud800":1}`), int64(0))
	f.Add("s", "item.created", "a", []byte("{\"a\":\"\xff\xfe\"}"), int64(0))
	f.Add("s", "item.created", "a", []byte(`{"a":[1e131072,1E-16384,0e1073741823]}`), int64(0))
	f.Add("s", "item.created", "a", []byte(`{"a":"\ud83d\ude00","b":1e131071}`), int64(253402300799))
	f.Add("s", "item.created", "a", []byte(`{}`), int64(-62167219201))
	now := time.Date(2026, 10, 10, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, space, typ, actor string, data []byte, occurred int64) {
		e := NewEvent{Space: space, Type: typ, Actor: actor, Data: data}
		if occurred != 0 {
			e.OccurredAt = time.Unix(occurred%(1<<38), 0) // ±8,700 years around 1970
		}
		if err := e.Normalize(now); err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if e.ID == uuid.Nil || e.OccurredAt.IsZero() {
			t.Fatalf("accepted event without id or time: %+v", e)
		}
		if len(e.Data) > MaxEventData {
			t.Fatalf("accepted %d bytes of data", len(e.Data))
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(e.Data, &obj); err != nil || obj == nil {
			t.Fatalf("accepted data that is not a JSON object: %q", e.Data)
		}
		var tree any
		dec := json.NewDecoder(bytes.NewReader(e.Data))
		dec.UseNumber()
		if err := dec.Decode(&tree); err != nil {
			t.Fatalf("accepted data does not decode: %v", err)
		}
		if !utf8.Valid(e.Data) || hasNUL(tree) {
			t.Fatalf("accepted data with invalid UTF-8 or a NUL: %q", e.Data)
		}
		if !namePattern.MatchString(e.Space) || !namePattern.MatchString(e.Actor) || !typePattern.MatchString(e.Type) {
			t.Fatalf("accepted bad names: %+v", e)
		}
		// Its envelope encodes and decodes to the same fields.
		ev := Event{Seq: 1, ID: e.ID, Space: e.Space, Type: e.Type, Actor: e.Actor, OccurredAt: e.OccurredAt, Data: e.Data}
		b, err := json.Marshal(ev.Envelope())
		if err != nil {
			t.Fatalf("envelope of an accepted event does not encode: %v", err)
		}
		var back Envelope
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("envelope does not decode: %v", err)
		}
		if back.ID != e.ID || back.Space != e.Space || back.Type != e.Type || back.Actor != e.Actor || !back.OccurredAt.Equal(e.OccurredAt) {
			t.Fatalf("envelope round trip changed fields: %+v -> %+v", e, back)
		}
	})
}

// hasNUL reports whether a decoded JSON value holds a NUL in a string or
// a key.
func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		return slices.ContainsFunc(v, hasNUL)
	case map[string]any:
		for k, x := range v {
			if strings.ContainsRune(k, 0) || hasNUL(x) {
				return true
			}
		}
	}
	return false
}

// FuzzEnvelopeDecode decodes fuzzed JSON as an Envelope (what a receiver
// or a replaying client does): never a panic, and what decodes encodes again
// and decodes to the same value.
func FuzzEnvelopeDecode(f *testing.F) {
	good := Event{Seq: 7, ID: uuid.MustParse("0190f6a0-0000-7000-8000-000000000001"), Space: "s", Type: "item.created",
		Actor: "a", OccurredAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Data: json.RawMessage(`{"k":"v"}`)}
	b, _ := json.Marshal(good.Envelope())
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"id":"not-a-uuid"}`))
	f.Add([]byte(`{"seq":1e400}`))
	f.Add([]byte(`{"occurred_at":"yesterday"}`))
	f.Add([]byte(`{"data":}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var env Envelope
		if err := json.Unmarshal(in, &env); err != nil {
			return
		}
		out, err := json.Marshal(env)
		if err != nil {
			// Only a time outside what RFC 3339 can write may fail here.
			if env.OccurredAt.Year() < 0 || env.OccurredAt.Year() > 9999 {
				return
			}
			t.Fatalf("decoded envelope does not encode: %v", err)
		}
		var again Envelope
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v\n%s", err, out)
		}
		if again.ID != env.ID || again.Seq != env.Seq || again.Type != env.Type || again.Space != env.Space ||
			again.Actor != env.Actor || !again.OccurredAt.Equal(env.OccurredAt) {
			t.Fatalf("round trip changed the envelope: %+v -> %+v", env, again)
		}
	})
}
