package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// FuzzEventLogWrite appends fuzzed events through EventLog.Write to a real
// database, with PostgreSQL's smallest max_stack_depth: whatever
// sync.NewEvent.Normalize accepts, the log must store (any database error
// for validated input is a failure, as it would be a 500 of the API), and
// appending the same event again must answer with the logged event. Input
// that Normalize refuses must leave the log as it was.
func FuzzEventLogWrite(f *testing.F) {
	for _, data := range []string{
		`{"a":1}`, `{}`, `{"s":"\u0000"}`, `{"\ud800":1}`, `{"s":"\udc00\ud800"}`, "{\"s\":\"\xff\"}",
		`{"n":1e131071}`, `{"n":1e131072}`, `{"n":1e-16383}`, `{"n":1e-16384}`, `{"n":0e1073741822}`,
		`{"s":"\ud83d\ude00","t":"\u00e9\uffff"}`, strings.Repeat(`{"a":`, 256) + "1" + strings.Repeat("}", 256),
		`{"a":[true,false,null,-0.0e-0,"\"\\\/\b\f\n\r\t"]}`, `[1]`, `null`, ``,
	} {
		f.Add("s1", "item.created", "alice", []byte(data), int64(0))
	}
	f.Add("s\x00", "item.created", "alice", []byte(`{}`), int64(1))
	f.Add("s1", "item.created", "alice", []byte(`{}`), int64(253402300799))  // 9999-12-31T23:59:59Z
	f.Add("s1", "item.created", "alice", []byte(`{}`), int64(-62167219200))  // 0000-01-01T00:00:00Z
	f.Add("s1", "item.created", "alice", []byte(`{}`), int64(-62167219201))  // a second before
	f.Add("s1", "item.created", "alice", []byte(`{}`), int64(9223372036854)) // beyond year 9999
	db := dbtest.NewDB(f)
	log := postgres.NewEventLog(db.Pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})
	ctx := context.Background()
	write := func(ne sync.NewEvent) ([]sync.Event, error) {
		return log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
			_, err := tx.Exec(ctx, `SET LOCAL max_stack_depth = '100kB'`)
			return []sync.NewEvent{ne}, err
		})
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, space, typ, actor string, data []byte, occurred int64) {
		ne := sync.NewEvent{Space: space, Type: typ, Actor: actor, Data: json.RawMessage(data)}
		if occurred != 0 {
			ne.OccurredAt = time.Unix(occurred%(1<<38), 0)
		}
		valid := ne
		if err := valid.Normalize(now); err != nil {
			before, err2 := postgres.Head(ctx, db.Pool)
			if err2 != nil {
				t.Fatal(err2)
			}
			if _, err := write(ne); err == nil {
				t.Fatal("Write accepted what Normalize refused")
			}
			after, err2 := postgres.Head(ctx, db.Pool)
			if err2 != nil {
				t.Fatal(err2)
			}
			if after != before {
				t.Fatalf("refused input appended events: head %d -> %d", before, after)
			}
			return
		}
		ne.ID = valid.ID
		evs, err := write(ne)
		if err != nil {
			t.Fatalf("the log refused an event Normalize accepted: %v\nspace %q type %q actor %q occurred %v\ndata %q",
				err, space, typ, actor, valid.OccurredAt, data)
		}
		again, err := write(ne)
		if err != nil {
			t.Fatalf("repeating an appended event failed: %v\ndata %q", err, data)
		}
		if !again[0].Duplicate || again[0].Seq != evs[0].Seq {
			t.Fatalf("a repeat was appended again: seq %d, then %d (duplicate %v)", evs[0].Seq, again[0].Seq, again[0].Duplicate)
		}
		if !again[0].OccurredAt.Equal(evs[0].OccurredAt) {
			t.Fatalf("the answer's occurred_at %v is not what the log kept, %v", evs[0].OccurredAt, again[0].OccurredAt)
		}
	})
}

// TestEventLog_WriteAcceptsWhatNormalizeAccepts appends data at the edges
// of what sync.NewEvent.Normalize accepts, with PostgreSQL's smallest
// max_stack_depth, and shows that PostgreSQL refuses what lies just past
// each edge (the nesting bound keeps a margin: there, past it by a few
// times), so each refusal is needed: an append never fails on input that
// validation accepted. FuzzEventLogWrite explores the rest.
func TestEventLog_WriteAcceptsWhatNormalizeAccepts(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	nest := func(depth int) string { // depth levels, the data object included
		return strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
	}
	accepted := []string{
		`{"n":1e131071}`, `{"n":-9.99e131071}`, `{"n":0.1e131072}`, `{"n":1e-16383}`, `{"n":0e1073741822}`,
		`{"n":0.000000}`, `{"s":"\ud83d\ude00 \uffff \u0001"}`, `{"\u00e9":"é"}`, nest(sync.MaxEventDataDepth),
		`{"a":[` + fmt.Sprint(1<<62) + `,-0,0.5E+3]}`,
	}
	for _, data := range accepted {
		ne := sync.NewEvent{Space: "s1", Type: "item.created", Actor: "alice", Data: json.RawMessage(data)}
		require.NoError(t, ne.Normalize(time.Now()), "%.60s", data)
		_, err := b.log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
			_, err := tx.Exec(ctx, `SET LOCAL max_stack_depth = '100kB'`)
			return []sync.NewEvent{ne}, err
		})
		require.NoError(t, err, "%.60s", data)
	}
	for _, at := range []time.Time{time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)} {
		_, err := b.log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
			return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "alice", OccurredAt: at}}, nil
		})
		require.NoError(t, err, at)
	}

	refused := []string{
		`{"n":1e131072}`, `{"n":10e131071}`, `{"n":1e-16384}`, `{"n":0.00e-16382}`, `{"n":0e1073741823}`,
		`{"s":"\u0000"}`, `{"\u0000":1}`, `{"s":"\ud800"}`, `{"s":"\udfff"}`, `{"s":"\ud800\u0041"}`,
		"{\"s\":\"\xff\"}", "{\"s\":\"\xed\xa0\x80\"}", nest(1000),
	}
	for _, data := range refused {
		ne := sync.NewEvent{Space: "s1", Type: "item.created", Actor: "alice", Data: json.RawMessage(data)}
		var fe *sync.FieldError
		require.ErrorAs(t, ne.Normalize(time.Now()), &fe, "%q", data)
		require.Equal(t, "data", fe.Field)
		err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL max_stack_depth = '100kB'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT $1::text::jsonb`, data)
			return err
		})
		require.Error(t, err, "PostgreSQL accepts %.60q: the refusal is not needed", data)
	}
}
