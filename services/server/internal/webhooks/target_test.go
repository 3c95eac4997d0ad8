package webhooks_test

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// fakeResolver answers from a map, so no test depends on real DNS.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range f[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	if len(out) == 0 {
		return nil, &netErr{host}
	}
	return out, nil
}

type netErr struct{ host string }

func (e *netErr) Error() string { return "no such host " + e.host }

var resolver = fakeResolver{
	"hooks.example.com": {"93.184.216.34"},
	"rebind.example":    {"93.184.216.34", "127.0.0.1"},
	"intranet.example":  {"10.0.0.7"},
	"localhost":         {"127.0.0.1", "::1"},
	"metadata.example":  {"169.254.169.254"},
}

func TestValidateTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	refused := []string{
		"http://127.0.0.1:8080/hook",
		"http://127.9.9.9/",
		"http://localhost:8080/hook",
		"http://[::1]/hook",
		"http://10.1.2.3/hook",
		"http://172.16.0.1/",
		"http://192.168.1.1/",
		"http://[fd00::1]/",
		"http://169.254.169.254/latest/meta-data",
		"http://[fe80::1]/",
		"http://100.64.0.1/",
		"http://0.0.0.0/",
		"http://[::ffff:127.0.0.1]/",
		"http://[64:ff9b::10.0.0.1]/",
		"http://[::127.0.0.1]/",
		"http://[2002:7f00:1::]/",
		"http://[2001::]/",
		"http://[::ffff:0:127.0.0.1]/",
		"http://2130706433/",
		"http://0x7f.1/",
		"http://0177.0.0.1/",
		"https://hooks.example.com:0/",
		"https://hooks.example.com:99999/",
		"https://hooks.example.com/" + strings.Repeat("a", 10<<10),
		"http://rebind.example/hook",
		"http://intranet.example/hook",
		"http://unknown.example/hook",
		"ftp://hooks.example.com/x",
		"/relative/path",
		"hooks.example.com/hook",
		"https://user:pass@hooks.example.com/hook",
		"https:///nohost",
	}
	for _, u := range refused {
		_, err := webhooks.ValidateTarget(ctx, resolver, u, false)
		require.ErrorIs(t, err, webhooks.ErrTargetRefused, u)
	}
	for _, u := range []string{"https://hooks.example.com/hook?x=1", "http://93.184.216.34:8080/"} {
		_, err := webhooks.ValidateTarget(ctx, resolver, u, false)
		require.NoError(t, err, u)
	}

	t.Run("RefusalNamesTheFieldAndTheReason", func(t *testing.T) {
		_, err := webhooks.ValidateTarget(ctx, resolver, "http://[::ffff:0:127.0.0.1]/", false)
		require.EqualError(t, err, "webhook target refused: url: address ::ffff:0:7f00:1 (carrying 127.0.0.1) is not public (loopback); "+
			"private targets are refused unless the server sets webhooks.allow_private_targets = true (for development and tests)")
	})
	t.Run("PrivateRefusalNamesTheSettingOthersDoNot", func(t *testing.T) {
		for _, u := range []string{"http://127.0.0.1:8080/", "http://localhost/", "http://10.0.0.1/", "http://intranet.example/"} {
			_, err := webhooks.ValidateTarget(ctx, resolver, u, false)
			require.ErrorContains(t, err, "unless the server sets webhooks.allow_private_targets = true", u)
		}
		for _, u := range []string{"http://169.254.169.254/", "gopher://x/", "http://unknown.example/"} {
			_, err := webhooks.ValidateTarget(ctx, resolver, u, false)
			require.ErrorIs(t, err, webhooks.ErrTargetRefused, u)
			require.NotContains(t, err.Error(), "allow_private_targets", "a setting that would not help: %s", u)
		}
	})
	t.Run("AllowPrivateTargetsLetsLoopbackAndPrivateThrough", func(t *testing.T) {
		for _, u := range []string{"http://127.0.0.1:8080/", "http://localhost/", "http://10.0.0.1/", "http://intranet.example/"} {
			_, err := webhooks.ValidateTarget(ctx, resolver, u, true)
			require.NoError(t, err, u)
		}
	})
	t.Run("MetadataIsRefusedEvenWhenPrivateIsAllowed", func(t *testing.T) {
		for _, u := range []string{
			"http://169.254.169.254/", "http://[fd00:ec2::254]/", "http://100.100.100.200/", "http://[::ffff:169.254.169.254]/",
			"http://[64:ff9b::a9fe:a9fe]/", "http://[2002:a9fe:a9fe::]/", "http://metadata.example/",
		} {
			_, err := webhooks.ValidateTarget(ctx, resolver, u, true)
			require.ErrorIs(t, err, webhooks.ErrTargetRefused, u)
			require.ErrorIs(t, err, egress.ErrRefused, u)
		}
	})
}

func TestCreate_RefusesPrivateAndLoopbackTargets(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	for _, u := range []string{"http://127.0.0.1:9/hook", "http://[::1]/", "http://10.0.0.1/", "http://169.254.169.254/", "gopher://x/"} {
		_, _, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1", URL: u})
		require.ErrorIs(t, err, webhooks.ErrTargetRefused, u)
		require.Contains(t, err.Error(), "refused")
	}
	_, _, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "nospace", URL: "https://hooks.example.com/",
		Resolver: resolver})
	require.ErrorIs(t, err, webhooks.ErrForbidden, "no right on the space")
	s, secret, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1", URL: "https://hooks.example.com/",
		Resolver: resolver})
	require.NoError(t, err)
	require.Regexp(t, `^whsec_[A-Za-z0-9+/]{43}=$`, secret)
	require.Equal(t, webhooks.StatusActive, s.Status)
}

func TestHTTPClient_RefusesLoopbackAtDial(t *testing.T) {
	t.Parallel()
	rv := newReceiver(t, nil)
	c := outbound.NewHTTPClient(time.Second, false)
	resp, err := c.Post(rv.url(), "application/json", http.NoBody)
	if resp != nil {
		_ = resp.Body.Close()
	}
	require.ErrorIs(t, err, webhooks.ErrTargetRefused)
	require.ErrorContains(t, err, "webhooks.allow_private_targets", "an attempt's error names the setting too")
	require.Zero(t, rv.count())

	c = outbound.NewHTTPClient(time.Second, true)
	resp, err = c.Post(rv.url(), "application/json", http.NoBody)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, 1, rv.count())
}
