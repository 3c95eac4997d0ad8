package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGroupContext_LatestDeadlineAtMostTheCap: a shared pipeline runs
// under the latest of its callers' deadlines, at most maxSharedWait from
// now (also when a caller has none), and none of their cancellations.
func TestGroupContext_LatestDeadlineAtMostTheCap(t *testing.T) {
	call := func(ctx context.Context) *appendCall { return &appendCall{ctx: ctx} }
	deadline := func(d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}
	deadlineOf := func(group ...*appendCall) time.Time {
		ctx, cancel := groupContext(group)
		defer cancel()
		d, ok := ctx.Deadline()
		require.True(t, ok, "a shared pipeline always has a deadline")
		return d
	}

	early, late := deadline(time.Second), deadline(5*time.Second)
	want, _ := late.Deadline()
	require.Equal(t, want, deadlineOf(call(early), call(late)), "the latest caller's deadline")

	before := time.Now()
	capped := deadlineOf(call(early), call(context.Background()))
	require.WithinRange(t, capped, before.Add(maxSharedWait), time.Now().Add(maxSharedWait), "no deadline: the cap")
	capped = deadlineOf(call(deadline(time.Hour)))
	require.WithinRange(t, capped, before.Add(maxSharedWait), time.Now().Add(maxSharedWait), "a later deadline: the cap")

	cancelled, cancel := context.WithCancel(context.Background())
	ctx, stop := groupContext([]*appendCall{call(cancelled)})
	defer stop()
	cancel()
	require.NoError(t, ctx.Err(), "a caller's cancellation does not stop the pipeline")
}
