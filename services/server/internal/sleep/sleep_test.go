package sleep_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sleep"
)

func TestFor(t *testing.T) {
	t.Parallel()
	require.NoError(t, sleep.For(context.Background(), time.Millisecond))
	require.NoError(t, sleep.For(context.Background(), 0))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, sleep.For(ctx, time.Hour), context.Canceled, "an ended context ends the wait at once")
	require.ErrorIs(t, sleep.For(ctx, 0), context.Canceled)
}
