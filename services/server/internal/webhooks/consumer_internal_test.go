package webhooks

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// matchesByScan is the rule the round applied to every filter of every
// subscription before filters were looked up: an exact type, "*", or a
// prefix pattern "p.*" that the type starts with ("p.").
func matchesByScan(pattern, typ string) bool {
	return pattern == typ || pattern == "*" ||
		(strings.HasSuffix(pattern, ".*") && strings.HasPrefix(typ, pattern[:len(pattern)-1]))
}

// TestCandidates holds candidates to the rule it replaces: a filter
// matches a type exactly when it is one of the type's candidates, for
// filters of the grammar and for the odd ones older rows may hold.
func TestCandidates(t *testing.T) {
	t.Parallel()
	if got := candidates("a.b.c"); !slices.Equal(got, []string{"a.b.c", "a.b.*", "a.*", "*"}) {
		t.Fatalf("candidates(a.b.c) = %q", got)
	}
	words := []string{"a", "b", "ab", "item", "items", "*", ""}
	join := func(r *rand.Rand) string {
		n := 1 + r.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = words[r.IntN(len(words))]
		}
		return strings.Join(parts, ".")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		typ, pattern := join(r), join(r)
		if got, want := slices.Contains(candidates(typ), pattern), matchesByScan(pattern, typ); got != want {
			t.Fatalf("type %q, filter %q: candidates says %v, the scan said %v", typ, pattern, got, want)
		}
		c := slices.Clone(candidates(typ))
		slices.Sort(c)
		if len(slices.Compact(c)) != len(candidates(typ)) {
			t.Fatalf("type %q: repeated candidates %q", typ, candidates(typ))
		}
	}
}
