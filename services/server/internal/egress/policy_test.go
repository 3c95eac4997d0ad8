package egress_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/egress"
)

// policyCase is a URL and whether each policy accepts it: strict is the
// production policy, private the one with AllowPrivate.
type policyCase struct {
	name    string
	url     string
	strict  bool
	private bool
}

const (
	refused = false
	allowed = true
)

var policyCases = []policyCase{
	// Public targets.
	{"PublicName", "https://hooks.example.com/h?x=1", allowed, allowed},
	{"PublicNameWithTrailingDot", "https://hooks.example.com./h", allowed, allowed},
	{"PublicIPv4WithPort", "http://93.184.216.34:8080/", allowed, allowed},
	{"PublicIPv6", "https://[2606:4700:4700::1111]/", allowed, allowed},
	{"UpperCaseSchemeAndHost", "HTTPS://HOOKS.EXAMPLE.COM/", allowed, allowed},

	// IPv4 carried in IPv6 is judged as the IPv4 address.
	{"MappedLoopback", "http://[::ffff:127.0.0.1]/", refused, allowed},
	{"MappedMetadata", "http://[::ffff:169.254.169.254]/", refused, refused},
	{"MappedPublic", "http://[::ffff:93.184.216.34]/", allowed, allowed},
	{"CompatibleLoopback", "http://[::127.0.0.1]/", refused, allowed},
	{"CompatiblePrivate", "http://[::10.0.0.1]/", refused, allowed},
	{"CompatibleMetadata", "http://[::169.254.169.254]/", refused, refused},
	{"CompatiblePublic", "http://[::93.184.216.34]/", allowed, allowed},
	{"TranslatedLoopback", "http://[::ffff:0:127.0.0.1]/", refused, allowed},
	{"TranslatedMetadata", "http://[::ffff:0:169.254.169.254]/", refused, refused},
	{"SixToFourLoopback", "http://[2002:7f00:1::]/", refused, allowed},
	{"SixToFourPrivate", "http://[2002:a00:1::1]/", refused, allowed},
	{"SixToFourMetadata", "http://[2002:a9fe:a9fe::]/", refused, refused},
	{"SixToFourPublic", "http://[2002:5db8:d822::1]/", allowed, allowed},
	{"TeredoBroadcastClient", "http://[2001::]/", refused, refused},
	{"TeredoLoopbackClient", "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", refused, allowed},
	{"TeredoMetadataClient", "http://[2001:0:4136:e378:8000:63bf:5601:5601]/", refused, refused},
	{"TeredoPublicClient", "http://[2001:0:4136:e378:8000:63bf:a247:27dd]/", allowed, allowed},
	{"NAT64Loopback", "http://[64:ff9b::7f00:1]/", refused, allowed},
	{"NAT64Private", "http://[64:ff9b::10.0.0.1]/", refused, allowed},
	{"NAT64Metadata", "http://[64:ff9b::a9fe:a9fe]/", refused, refused},
	{"NAT64Public", "http://[64:ff9b::5db8:d822]/", allowed, allowed},
	{"LocalNAT64Private", "http://[64:ff9b:1::a00:1]/", refused, allowed},
	{"LocalNAT64Metadata", "http://[64:ff9b:1::a9fe:a9fe]/", refused, refused},

	// Loopback, private and the other special-purpose ranges.
	{"Loopback", "http://127.0.0.1:8080/", refused, allowed},
	{"LoopbackRange", "http://127.9.9.9/", refused, allowed},
	{"LoopbackIPv6", "http://[::1]/", refused, allowed},
	{"Localhost", "http://localhost:8080/", refused, allowed},
	{"LocalhostUpperCaseWithDot", "http://LOCALHOST./", refused, allowed},
	{"LocalhostSubdomain", "http://api.localhost/", refused, allowed},
	{"Private10", "http://10.1.2.3/", refused, allowed},
	{"Private172", "http://172.16.0.1/", refused, allowed},
	{"Private192", "http://192.168.1.1/", refused, allowed},
	{"UniqueLocalIPv6", "http://[fd00::1]/", refused, allowed},
	{"LinkLocalIPv6", "http://[fe80::1]/", refused, allowed},
	{"LinkLocalIPv6WithZone", "http://[fe80::1%25eth0]/", refused, allowed},
	{"SharedAddressSpace", "http://100.64.0.1/", refused, allowed},
	{"ThisNetwork", "http://0.1.2.3/", refused, allowed},
	{"IETFProtocolAssignments", "http://192.0.0.8/", refused, allowed},
	{"DocumentationTestNet1", "http://192.0.2.1/", refused, allowed},
	{"DocumentationTestNet2", "http://198.51.100.1/", refused, allowed},
	{"DocumentationTestNet3", "http://203.0.113.1/", refused, allowed},
	{"DocumentationIPv6", "http://[2001:db8::1]/", refused, allowed},
	{"DocumentationIPv6New", "http://[3fff::1]/", refused, allowed},
	{"Benchmarking", "http://198.18.0.1/", refused, allowed},
	{"BenchmarkingIPv6", "http://[2001:2::1]/", refused, allowed},
	{"Reserved", "http://240.0.0.1/", refused, allowed},
	{"DiscardIPv6", "http://[100::1]/", refused, allowed},
	{"SixToFourRelayAnycast", "http://192.88.99.1/", refused, allowed},

	// Never a unicast destination, under either policy.
	{"Unspecified", "http://0.0.0.0/", refused, refused},
	{"UnspecifiedIPv6", "http://[::]/", refused, refused},
	{"Multicast", "http://224.0.0.1/", refused, refused},
	{"MulticastIPv6", "http://[ff02::1]/", refused, refused},
	{"Broadcast", "http://255.255.255.255/", refused, refused},

	// Cloud metadata, under either policy.
	{"MetadataAWSGCPAzure", "http://169.254.169.254/latest/meta-data", refused, refused},
	{"MetadataECS", "http://169.254.170.2/", refused, refused},
	{"LinkLocalIPv4", "http://169.254.1.1/", refused, refused},
	{"MetadataAWSIPv6", "http://[fd00:ec2::254]/", refused, refused},
	{"MetadataAlibaba", "http://100.100.100.200/", refused, refused},
	{"AzureWireServer", "http://168.63.129.16/", refused, refused},

	// Numeric hosts other than a dotted quad, under either policy.
	{"DecimalIPv4", "http://2130706433/", refused, refused},
	{"HexIPv4", "http://0x7f000001/", refused, refused},
	{"HexParts", "http://0x7f.1/", refused, refused},
	{"OctalParts", "http://0177.0.0.1/", refused, refused},
	{"OctalWhole", "http://017700000001/", refused, refused},
	{"TwoParts", "http://127.1/", refused, refused},
	{"ThreeParts", "http://1.2.3/", refused, refused},
	{"DottedQuadWithTrailingDot", "http://127.0.0.1./", refused, refused},
	{"PublicShorthand", "http://93.184.55330/", refused, refused},
	{"BareHexPrefix", "http://0x/", refused, refused},
	{"NumericTopLevelLabel", "http://example.123/", refused, refused},

	// Ports.
	{"PortOne", "http://hooks.example.com:1/", allowed, allowed},
	{"PortMax", "http://hooks.example.com:65535/", allowed, allowed},
	{"EmptyPort", "http://hooks.example.com:/", allowed, allowed},
	{"PortZero", "http://hooks.example.com:0/", refused, refused},
	{"PortTooLarge", "http://hooks.example.com:65536/", refused, refused},
	{"PortFarTooLarge", "http://hooks.example.com:99999/", refused, refused},

	// Length.
	{"LongestURL", "https://hooks.example.com/" + strings.Repeat("a", egress.MaxURLLength-26), allowed, allowed},
	{"OneByteTooLong", "https://hooks.example.com/" + strings.Repeat("a", egress.MaxURLLength-25), refused, refused},
	{"TenKilobytes", "https://hooks.example.com/" + strings.Repeat("a", 10<<10), refused, refused},

	// Scheme and shape.
	{"FTP", "ftp://hooks.example.com/x", refused, refused},
	{"Gopher", "gopher://hooks.example.com/", refused, refused},
	{"File", "file:///etc/passwd", refused, refused},
	{"JavaScript", "javascript:alert(1)", refused, refused},
	{"Opaque", "http:hooks.example.com", refused, refused},
	{"Relative", "/relative/path", refused, refused},
	{"NoScheme", "hooks.example.com/hook", refused, refused},
	{"NoHost", "https:///nohost", refused, refused},
	{"UserInformation", "https://user:pass@hooks.example.com/", refused, refused},
	{"Fragment", "https://hooks.example.com/#frag", refused, refused},
	{"BadEscape", "https://%zz/", refused, refused},
	{"Empty", "", refused, refused},
}

func TestPolicy_CheckURL(t *testing.T) {
	t.Parallel()
	for _, tc := range policyCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, pc := range []struct {
				policy egress.Policy
				want   bool
			}{{egress.Policy{}, tc.strict}, {egress.Policy{AllowPrivate: true}, tc.private}} {
				u, err := pc.policy.CheckURL(tc.url)
				if pc.want {
					require.NoError(t, err, "AllowPrivate=%v", pc.policy.AllowPrivate)
					require.NotNil(t, u)
					continue
				}
				require.ErrorIs(t, err, egress.ErrRefused, "AllowPrivate=%v", pc.policy.AllowPrivate)
				requirePrivateMark(t, err, !pc.policy.AllowPrivate && tc.private)
				require.Nil(t, u)
			}
		})
	}

	t.Run("RefusalNamesTheCarriedAddress", func(t *testing.T) {
		t.Parallel()
		_, err := egress.Policy{}.CheckURL("http://[2002:7f00:1::]/")
		require.EqualError(t, err, "address 2002:7f00:1:: (carrying 127.0.0.1) is not public (loopback)")
	})
}

// requirePrivateMark requires a refusal to match egress.ErrPrivate exactly
// when AllowPrivate would have let the target through, so callers that
// name the setting name it for those refusals and no others.
func requirePrivateMark(t *testing.T, err error, lifted bool) {
	t.Helper()
	if lifted {
		require.ErrorIs(t, err, egress.ErrPrivate)
	} else {
		require.NotErrorIs(t, err, egress.ErrPrivate)
	}
}

// fakeResolver answers from a map, so no test depends on real DNS.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := f[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

func TestPolicy_CheckResolved(t *testing.T) {
	t.Parallel()
	r := fakeResolver{
		"hooks.example.com": {"93.184.216.34", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"rebind.example":    {"93.184.216.34", "127.0.0.1"},
		"intranet.example":  {"10.0.0.7"},
		"mapped.example":    {"::ffff:10.0.0.7"},
		"metadata.example":  {"169.254.169.254"},
		"nat64meta.example": {"64:ff9b::a9fe:a9fe"},
		"empty.example":     {},
	}
	for _, tc := range []struct {
		name    string
		host    string
		strict  bool
		private bool
	}{
		{"PublicName", "hooks.example.com", allowed, allowed},
		{"OneOfTheAddressesIsLoopback", "rebind.example", refused, allowed},
		{"PrivateName", "intranet.example", refused, allowed},
		{"NameResolvingToMappedPrivate", "mapped.example", refused, allowed},
		{"NameResolvingToMetadata", "metadata.example", refused, refused},
		{"NameResolvingToNAT64Metadata", "nat64meta.example", refused, refused},
		{"NoAddress", "empty.example", refused, refused},
		{"LookupFails", "unknown.example", refused, refused},
		{"LiteralIsCheckedWithoutLookup", "10.0.0.1", refused, allowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, pc := range []struct {
				policy egress.Policy
				want   bool
			}{{egress.Policy{}, tc.strict}, {egress.Policy{AllowPrivate: true}, tc.private}} {
				err := pc.policy.CheckResolved(context.Background(), r, tc.host)
				if pc.want {
					require.NoError(t, err, "AllowPrivate=%v", pc.policy.AllowPrivate)
					continue
				}
				require.ErrorIs(t, err, egress.ErrRefused, "AllowPrivate=%v", pc.policy.AllowPrivate)
				requirePrivateMark(t, err, !pc.policy.AllowPrivate && tc.private)
			}
		})
	}
}

func TestPolicy_Control(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	dial := func(p egress.Policy, address string) error {
		d := &net.Dialer{Timeout: 5 * time.Second, Control: p.Control}
		c, err := d.DialContext(context.Background(), "tcp", address)
		if err == nil {
			_ = c.Close()
		}
		return err
	}

	t.Run("RefusesANameThatResolvesToLoopback", func(t *testing.T) {
		t.Parallel()
		// localhost passes no URL check here: the name is resolved by the
		// dialer (from /etc/hosts), and only Control sees 127.0.0.1.
		require.ErrorIs(t, dial(egress.Policy{}, net.JoinHostPort("localhost", port)), egress.ErrRefused)
	})
	t.Run("RefusesALoopbackLiteral", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, dial(egress.Policy{}, net.JoinHostPort("127.0.0.1", port)), egress.ErrRefused)
	})
	t.Run("AllowPrivateReachesTheSameListener", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, dial(egress.Policy{AllowPrivate: true}, net.JoinHostPort("localhost", port)))
	})
	t.Run("RefusesMetadataEvenWithPrivateAllowed", func(t *testing.T) {
		t.Parallel()
		p := egress.Policy{AllowPrivate: true}
		for _, a := range []string{"169.254.169.254:80", "[::ffff:169.254.169.254]:80", "[64:ff9b::a9fe:a9fe]:80", "[fd00:ec2::254]:80", "100.100.100.200:80"} {
			require.ErrorIs(t, p.Control("tcp", a, nil), egress.ErrRefused, a)
		}
	})
	t.Run("RefusesEmbeddedLoopback", func(t *testing.T) {
		t.Parallel()
		for _, a := range []string{"[::127.0.0.1]:80", "[2002:7f00:1::]:80", "[::ffff:0:127.0.0.1]:80", "[2001::]:80"} {
			require.ErrorIs(t, egress.Policy{}.Control("tcp6", a, nil), egress.ErrRefused, a)
		}
	})
	t.Run("AcceptsAPublicAddress", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, egress.Policy{}.Control("tcp4", "93.184.216.34:443", nil))
	})
	t.Run("RefusesOtherNetworksPortZeroAndGarbage", func(t *testing.T) {
		t.Parallel()
		p := egress.Policy{AllowPrivate: true}
		require.ErrorIs(t, p.Control("udp4", "93.184.216.34:53", nil), egress.ErrRefused)
		require.ErrorIs(t, p.Control("tcp4", "93.184.216.34:0", nil), egress.ErrRefused)
		require.ErrorIs(t, p.Control("tcp4", "not an address", nil), egress.ErrRefused)
	})
}

func TestPolicy_CheckAddress(t *testing.T) {
	t.Parallel()
	r := fakeResolver{"mq.example.com": {"93.184.216.34"}, "intranet.example": {"10.0.0.7"}, "localhost": {"127.0.0.1"}}
	for _, tc := range []struct {
		name    string
		addr    string
		strict  bool
		private bool
	}{
		{"PublicName", "mq.example.com:5672", allowed, allowed},
		{"PrivateName", "intranet.example:5672", refused, allowed},
		{"Loopback", "127.0.0.1:5672", refused, allowed},
		{"Localhost", "localhost:5672", refused, allowed},
		{"Metadata", "169.254.169.254:80", refused, refused},
		{"NumericNotDottedQuad", "0x7f.1:5672", refused, refused},
		{"NoPort", "mq.example.com", refused, refused},
		{"PortZero", "mq.example.com:0", refused, refused},
		{"PortOutOfRange", "mq.example.com:70000", refused, refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range []struct {
				policy egress.Policy
				want   bool
			}{{egress.Policy{}, tc.strict}, {egress.Policy{AllowPrivate: true}, tc.private}} {
				err := p.policy.CheckAddress(context.Background(), r, tc.addr)
				if p.want {
					require.NoError(t, err, "AllowPrivate=%v", p.policy.AllowPrivate)
				} else {
					require.ErrorIs(t, err, egress.ErrRefused, "AllowPrivate=%v", p.policy.AllowPrivate)
				}
			}
		})
	}
}
