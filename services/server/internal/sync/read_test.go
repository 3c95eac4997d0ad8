package sync_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
)

func TestSpaceBroadcast(t *testing.T) {
	t.Parallel()
	asleep := func(t *testing.T, ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
			t.Fatal(what)
		default:
		}
	}

	t.Run("WakesTheReadersOfTheSpacesNamed", func(t *testing.T) {
		t.Parallel()
		bc := sync.NewSpaceBroadcast()
		a1, stopA1 := bc.Watch("a")
		defer stopA1()
		a2, stopA2 := bc.Watch("a")
		defer stopA2()
		b, stopB := bc.Watch("b")
		defer stopB()
		ca1, ca2, cb := a1(), a2(), b()
		asleep(t, ca1, "woken before Wake")
		require.Equal(t, 2, bc.Wake([]string{"a", "x"}))
		<-ca1
		<-ca2
		asleep(t, cb, "a reader of b woken by a's wake")
		asleep(t, a1(), "a channel taken after Wake waits for the next")
		require.Equal(t, 3, bc.WakeAll())
		<-cb
	})
	t.Run("AStoppedWatchIsNotCounted", func(t *testing.T) {
		t.Parallel()
		bc := sync.NewSpaceBroadcast()
		_, stop := bc.Watch("a")
		stop()
		stop()
		require.Zero(t, bc.Wake([]string{"a"}))
		a, stopA := bc.Watch("a")
		defer stopA()
		ch := a()
		require.Equal(t, 1, bc.WakeAll())
		<-ch
	})
}

func TestSpaceWaker_MetricsLint(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	sync.NewSpaceWaker(nil, sync.NewSpaceBroadcast(), &sync.SpaceWakerConfig{Registerer: reg})
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestMatchesType(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p, typ string
		want   bool
	}{
		{"*", "a.b", true}, {"a.*", "a.b", true}, {"a.*", "a.b.c", true}, {"a.*", "ab.c", false},
		{"a.b", "a.b", true}, {"a.b", "a.b.c", false}, {"a.b.*", "a.b", false},
	} {
		if !sync.ValidTypePattern(c.p) {
			t.Fatalf("%q is not a pattern", c.p)
		}
		if got := sync.MatchesType(c.p, c.typ); got != c.want {
			t.Errorf("MatchesType(%q, %q) = %v", c.p, c.typ, got)
		}
	}
	for _, bad := range []string{"", "a.", "*.a", "A.b", "a.*.b", "a*"} {
		if sync.ValidTypePattern(bad) {
			t.Errorf("%q is taken for a pattern", bad)
		}
	}
}
