package sync_test

import (
	"testing"

	"github.com/bothy/bothy/services/server/internal/sync"
)

func TestBroadcast_WakesEveryWaiterOnce(t *testing.T) {
	t.Parallel()
	bc := sync.NewBroadcast()
	a, b := bc.Changed(), bc.Changed()
	select {
	case <-a:
		t.Fatal("woken before Wake")
	default:
	}
	bc.Wake()
	<-a
	<-b
	c := bc.Changed()
	select {
	case <-c:
		t.Fatal("a channel taken after Wake waits for the next")
	default:
	}
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
