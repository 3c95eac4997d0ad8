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
	} {
		_, err := config.Load("", nil, flags)
		require.Error(t, err, name)
		want := "console.key"
		if name == "FrameAncestorsList" {
			want = "console.frame_ancestors"
		}
		require.Contains(t, err.Error(), want, name)
	}
	cfg, err := config.Load("", nil, map[string]string{"console.enabled": "true", "console.key": key})
	require.NoError(t, err)
	require.True(t, cfg.Console.Enabled)
	require.Equal(t, "'none'", cfg.Console.FrameAncestors)
}
