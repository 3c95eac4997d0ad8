package push_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/push"
)

func TestMetrics_Lint(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	push.NewMetrics(reg)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
	n, err := testutil.GatherAndCount(reg, "bothy_push_deliveries_total", "bothy_push_sends_unrecorded_total")
	require.NoError(t, err)
	require.Equal(t, 8, n, "seven results and the unrecorded counter, all present from the start")
}
