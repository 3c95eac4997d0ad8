package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/config"
)

// TestLoad_Console: the console refuses to start without a signing key of
// at least 32 characters, and the error names the key.
func TestLoad_Console(t *testing.T) {
	t.Parallel()
	key := "0123456789abcdef0123456789abcdef"
	for name, flags := range map[string]map[string]string{
		"EnabledWithoutKey":  {"console.enabled": "true"},
		"EnabledShortKey":    {"console.enabled": "true", "console.key": key[:31]},
		"ShortKeyEvenIfOff":  {"console.key": "short"},
		"FrameAncestorsList": {"console.frame_ancestors": "https://a.example; script-src *"},
		"SecureCookiesWord":  {"console.secure_cookies": "sometimes"},
		"PublicURLRelative":  {"console.public_url": "/console"},
		"PublicURLScheme":    {"console.public_url": "ftp://bothy.example.com"},
		"PublicURLQuery":     {"console.public_url": "https://bothy.example.com/?a=b"},
	} {
		_, err := config.Load("", nil, flags)
		require.Error(t, err, name)
		want := map[string]string{"FrameAncestorsList": "console.frame_ancestors",
			"SecureCookiesWord": "console.secure_cookies", "PublicURLRelative": "console.public_url",
			"PublicURLScheme": "console.public_url", "PublicURLQuery": "console.public_url"}[name]
		if want == "" {
			want = "console.key"
		}
		require.Contains(t, err.Error(), want, name)
	}
	cfg, err := config.Load("", nil, map[string]string{"console.enabled": "true", "console.key": key})
	require.NoError(t, err)
	require.True(t, cfg.Console.Enabled)
	require.Equal(t, "'none'", cfg.Console.FrameAncestors)
	require.False(t, cfg.Console.SecureCookies)
	cfg, err = config.Load("", nil, map[string]string{"console.secure_cookies": "true"})
	require.NoError(t, err)
	require.True(t, cfg.Console.SecureCookies)
	cfg, err = config.Load("", nil, map[string]string{"console.public_url": "https://bothy.example.com/base/"})
	require.NoError(t, err)
	require.Equal(t, "https://bothy.example.com/base/", cfg.Console.PublicURL)
}
