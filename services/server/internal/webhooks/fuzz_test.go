package webhooks

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// fuzzResolver answers without DNS: names under .internal resolve to a
// private address, .meta to the cloud metadata address, .none to nothing,
// .fail fails, anything else to a documentation-range public-looking
// address and a public one.
type fuzzResolver struct{}

func (fuzzResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	switch {
	case strings.HasSuffix(host, ".internal"):
		return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
	case strings.HasSuffix(host, ".meta"):
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	case strings.HasSuffix(host, ".none"):
		return nil, nil
	case strings.HasSuffix(host, ".fail"):
		return nil, errors.New("no such host")
	}
	return []netip.Addr{netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("2606:2800:21f:cb07:6820:80da:af6b:8b2c")}, nil
}

var targetSeeds = []string{
	"https://hooks.example.com/bothy?x=1", "http://127.0.0.1:8080/h", "https://[::1]/h", "https://10.0.0.1/",
	"https://169.254.169.254/latest", "https://[::ffff:127.0.0.1]/", "https://[64:ff9b::a9fe:a9fe]/", "https://0x7f.1/",
	"https://user:pw@example.com/", "ftp://example.com/", "//example.com/", "https:///path", "https://a.internal/",
	"https://a.meta/", "https://a.none/", "https://a.fail/", "https://localhost/", "https://x.localhost:1/", "https://e.com/#frag",
	"https://%zz/", "https://e.com:99999/", "http://[fe80::1%25eth0]/", "https://0.0.0.0/", "https://255.255.255.255/", "",
	"https://e.com/\x00", "HTTPS://E.COM/", "http://[::127.0.0.1]/", "http://[2002:7f00:1::]/", "http://[2001::]/",
	"http://[::ffff:0:127.0.0.1]/", "https://[2002:a9fe:a9fe::]/", "https://[2001:0:4136:e378:8000:63bf:5601:5601]/",
	"https://[64:ff9b:1::a9fe:a9fe]/", "http://2130706433/", "http://0177.0.0.1/", "http://127.1/", "https://e.com:0/",
	"https://e.com:65535/", "https://e.com./", "https://localhost./",
}

// FuzzValidateTarget checks fuzzed subscription URLs: never a panic, every
// refusal wraps ErrTargetRefused, and an accepted URL is absolute http(s)
// with a host, no user information, no fragment, a port from 1 to 65535 if
// any, and at most egress.MaxURLLength bytes.
func FuzzValidateTarget(f *testing.F) {
	for _, s := range targetSeeds {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, raw string, allowPrivate bool) {
		u, err := ValidateTarget(context.Background(), fuzzResolver{}, raw, allowPrivate)
		if err != nil {
			if !errors.Is(err, ErrTargetRefused) {
				t.Fatalf("%q: refusal does not wrap ErrTargetRefused: %v", raw, err)
			}
			return
		}
		if u == nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.Fragment != "" {
			t.Fatalf("%q accepted as %v", raw, u)
		}
		if len(raw) > egress.MaxURLLength {
			t.Fatalf("a URL of %d bytes was accepted", len(raw))
		}
		if ps := u.Port(); ps != "" {
			if n, err := strconv.Atoi(ps); err != nil || n < 1 || n > 65535 {
				t.Fatalf("%q: port %q accepted", raw, ps)
			}
		}
		if strings.HasSuffix(u.Hostname(), ".meta") {
			t.Fatalf("%q: a name resolving to the metadata address was accepted", raw)
		}
		if !allowPrivate && strings.HasSuffix(u.Hostname(), ".internal") {
			t.Fatalf("%q: a name resolving to a private address was accepted", raw)
		}
	})
}

// FuzzCreate creates subscriptions from fuzzed URLs, event type filters and
// secrets on a real database: bad input is a clear error (ErrTargetRefused,
// ErrInvalid) and never leaves a row behind.
func FuzzCreate(f *testing.F) {
	for i, s := range targetSeeds {
		f.Add(s, []string{"", "item.created", "item.*", "*", "Item", "item..x", "a.*.b", "\x00"}[i%8], []string{"", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "nope", "whsec_!!!!!!!!!!"}[i%5], i%2 == 0)
	}
	db := dbtest.NewDB(f)
	ctx := context.Background()
	if err := authz.CreatePrincipal(ctx, db.Pool, "fuzz-owner", authz.KindUser); err != nil {
		f.Fatal(err)
	}
	if err := authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: "s1", Principal: "fuzz-owner", Right: authz.RightAdmin}); err != nil {
		f.Fatal(err)
	}
	count := func(t *testing.T) int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_subscriptions`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	f.Fuzz(func(t *testing.T, raw, eventType, secret string, allowPrivate bool) {
		var types []string
		if eventType != "" {
			types = []string{eventType}
		}
		before := count(t)
		s, got, err := Create(ctx, db.Pool, postgres.CursorStore{}, &CreateParams{Owner: "fuzz-owner", Space: "s1", URL: raw, EventTypes: types,
			Secret: secret, AllowPrivateTargets: allowPrivate, Resolver: fuzzResolver{}})
		after := count(t)
		if err != nil {
			if !errors.Is(err, ErrTargetRefused) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("url %q types %q secret %q: not a validation error: %v", raw, types, secret, err)
			}
			if s != nil || got != "" || after != before {
				t.Fatalf("refused input left a subscription behind (rows %d -> %d)", before, after)
			}
			return
		}
		if after != before+1 || s == nil || !strings.HasPrefix(got, "whsec_") {
			t.Fatalf("accepted input: rows %d -> %d, secret form %v", before, after, strings.HasPrefix(got, "whsec_"))
		}
		if _, err := db.Pool.Exec(ctx, `DELETE FROM webhook_subscriptions WHERE id = $1`, s.ID); err != nil {
			t.Fatal(err)
		}
	})
}
