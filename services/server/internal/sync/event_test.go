package sync_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
)

func TestNewEvent_Normalize(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 10, 12, 0, 0, 123456789, time.UTC)
	valid := func() sync.NewEvent {
		return sync.NewEvent{Space: "s1", Type: "item.created", Actor: "alice", Data: json.RawMessage(`{"a":1}`)}
	}

	t.Run("FillsDefaultsToTheMicrosecond", func(t *testing.T) {
		e := sync.NewEvent{Space: "s1", Type: "item.created", Actor: "alice"}
		require.NoError(t, e.Normalize(now))
		require.NotEqual(t, uuid.Nil, e.ID)
		require.Equal(t, uuid.Version(7), e.ID.Version())
		require.Equal(t, now.Truncate(time.Microsecond), e.OccurredAt)
		require.JSONEq(t, `{}`, string(e.Data))
	})
	t.Run("NamesTheRefusedField", func(t *testing.T) {
		deep := strings.Repeat(`{"a":`, sync.MaxEventDataDepth+1) + "1" + strings.Repeat("}", sync.MaxEventDataDepth+1)
		for _, tc := range []struct {
			name   string
			change func(*sync.NewEvent)
			field  string
			reason string
		}{
			{"SpaceWithNUL", func(e *sync.NewEvent) { e.Space = "s\x00" }, "space", `"s\x00"`},
			{"UpperCaseType", func(e *sync.NewEvent) { e.Type = "Item.Created" }, "type", "dotted"},
			{"EmptyActor", func(e *sync.NewEvent) { e.Actor = "" }, "actor", "1-128"},
			{"DataArray", func(e *sync.NewEvent) { e.Data = json.RawMessage(`[1]`) }, "data", "JSON object"},
			{"DataTooLarge", func(e *sync.NewEvent) {
				e.Data = json.RawMessage(`{"a":"` + strings.Repeat("x", sync.MaxEventData) + `"}`)
			}, "data", "bytes"},
			{"NULEscapeInValue", func(e *sync.NewEvent) { e.Data = json.RawMessage(`{"a":{"note":"x\u0000"}}`) }, "data", `a string contains \u0000, which PostgreSQL jsonb cannot store (at "/a/note")`},
			{"NULEscapeInKey", func(e *sync.NewEvent) { e.Data = json.RawMessage(`{"a":[{"k\u0000":1}]}`) }, "data", `a key contains \u0000, which PostgreSQL jsonb cannot store (at "/a/0")`},
			{"LoneHighSurrogate", func(e *sync.NewEvent) { e.Data = json.RawMessage(`{"a":"\ud800"}`) }, "data", `lone UTF-16 surrogate (\ud800)`},
			{"HighSurrogateThenOtherEscape", func(e *sync.NewEvent) { e.Data = json.RawMessage(`{"a":"\uD800\u0041"}`) }, "data", `lone UTF-16 surrogate (\ud800)`},
			{"LoneLowSurrogate", func(e *sync.NewEvent) { e.Data = json.RawMessage(`{"a":"x\udc00"}`) }, "data", `lone UTF-16 surrogate (\udc00)`},
			{"InvalidUTF8", func(e *sync.NewEvent) { e.Data = json.RawMessage("{\"a/b~\":\"\xc3\x28\"}") }, "data", `not valid UTF-8, which PostgreSQL cannot store (at "/a~1b~0")`},
			{"UTF8EncodedSurrogate", func(e *sync.NewEvent) { e.Data = json.RawMessage("{\"a\":\"\xed\xa0\x80\"}") }, "data", "not valid UTF-8"},
			{"NumberTooLarge", func(e *sync.NewEvent) { e.Data = json.RawMessage(`{"n":1e131072}`) }, "data", `number 1e131072 is beyond what PostgreSQL numeric can store (at "/n")`},
			{"NumberWithTooManyDecimals", func(e *sync.NewEvent) { e.Data = json.RawMessage(`{"n":1.5E-16383}`) }, "data", "numeric"},
			{"ZeroWithHugeExponent", func(e *sync.NewEvent) { e.Data = json.RawMessage(`{"n":0e99999999999}`) }, "data", "numeric"},
			{"NestedTooDeep", func(e *sync.NewEvent) { e.Data = json.RawMessage(deep) }, "data", "deeper than 256"},
			{"OccurredAfterYear9999", func(e *sync.NewEvent) { e.OccurredAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "occurred_at", "0000 and 9999"},
			{"OccurredBeforeYear0InUTC", func(e *sync.NewEvent) {
				e.OccurredAt = time.Date(0, 1, 1, 0, 30, 0, 0, time.FixedZone("", 3600))
			}, "occurred_at", "0000 and 9999"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := valid()
				tc.change(&e)
				err := e.Normalize(now)
				var fe *sync.FieldError
				require.ErrorAs(t, err, &fe)
				require.Equal(t, tc.field, fe.Field)
				require.Contains(t, fe.Reason, tc.reason)
				require.Equal(t, "event "+tc.field+": "+fe.Reason, err.Error())
			})
		}
	})
	t.Run("AcceptsWhatJSONBStores", func(t *testing.T) {
		for _, data := range []string{
			`{"s":"\ud83d\ude00 \uD83D\uDE00 \u0001 \uffff é \"\\\/\b\f\n\r\t"}`,
			`{"n":[1e131071,-9.99e131071,0.01e131073,1e-16383,0e1073741822,0.5E+3,-0,123456789012345678901234567890]}`,
			`{"a/b~c":{"":[true,false,null,{},[]]}}`,
			" \t\r\n{ \"a\" : [ 1 , 2 ] } ",
			strings.Repeat(`{"a":`, sync.MaxEventDataDepth) + "1" + strings.Repeat("}", sync.MaxEventDataDepth),
		} {
			e := valid()
			e.Data = json.RawMessage(data)
			require.NoError(t, e.Normalize(now), "%.80s", data)
		}
		for _, at := range []time.Time{time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)} {
			e := valid()
			e.OccurredAt = at
			require.NoError(t, e.Normalize(now), at)
		}
	})
}

func TestCheckSpace(t *testing.T) {
	t.Parallel()
	require.NoError(t, sync.CheckSpace("team-1:docs@x.y_z"))
	for _, bad := range []string{"", " bad", "\x00", "s\xff", strings.Repeat("a", 129), "a/b"} {
		var fe *sync.FieldError
		require.ErrorAs(t, sync.CheckSpace(bad), &fe, "%q", bad)
		require.Equal(t, "space", fe.Field)
	}
}

// TestCheckJSONText: every string of a request body, keys too, at any
// depth, is checked for what PostgreSQL cannot store, and named by its JSON
// Pointer; numbers and depth are left to the decoder.
func TestCheckJSONText(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`[`, 300) + `"\u0000"` + strings.Repeat(`]`, 300)
	for _, tc := range []struct {
		name, body, want string
	}{
		{"Clean", `{"space":"s1","n":1e400,"events":[{"type":"a.b","data":{"x":[true,null,"\ud83d\ude00"]}}]}`, ""},
		{"NULInValue", `{"space":"s\u0000"}`, `a string contains \u0000, which PostgreSQL cannot store (at "/space")`},
		{"NULInNestedValue", `{"events":[{"type":"a"},{"type":"\u0000"}]}`, `(at "/events/1/type")`},
		{"NULInKey", `{"headers":{"X-\u0000":"v"}}`, `a key contains \u0000, which PostgreSQL cannot store (at "/headers")`},
		{"InvalidUTF8", "{\"principal\":\"p\xc3\"}", `not valid UTF-8, which PostgreSQL cannot store (at "/principal")`},
		{"LoneSurrogate", `{"url":"\udc00"}`, `lone UTF-16 surrogate (\udc00), which PostgreSQL cannot store (at "/url")`},
		{"DeeperThanEventData", deep, `a string contains \u0000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := sync.CheckJSONText([]byte(tc.body))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}
