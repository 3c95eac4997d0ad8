package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTimeFlags: every time flag takes an RFC 3339 time or a duration
// before now, and a bad value names the flag and both forms.
func TestTimeFlags(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

	since, until := "10m", "2026-12-01T07:55:00.5Z"
	require.NoError(t, resolveTimes(now, timeFlag{"--since", &since}, timeFlag{"--until", &until}))
	require.Equal(t, "2026-12-01T07:50:00Z", since)
	require.Equal(t, "2026-12-01T07:55:00.5Z", until)

	req, err := recoverRange(0, 0, "1h30m", "", now)
	require.NoError(t, err)
	require.Equal(t, now.Add(-90*time.Minute), *req.Since)

	for _, bad := range []string{"yesterday", "-5m", "2026-12-01"} {
		v := bad
		err := resolveTimes(now, timeFlag{"--since", &v})
		require.ErrorIs(t, err, errUsage)
		require.ErrorContains(t, err, `--since "`+bad+`": want an RFC 3339 time such as 2026-12-01T08:00:00Z, or a duration before now such as 10m or 36h`)
	}
	_, err = recoverRange(0, 0, "", "soon", now)
	require.ErrorContains(t, err, `--until "soon": want an RFC 3339 time`)
}
