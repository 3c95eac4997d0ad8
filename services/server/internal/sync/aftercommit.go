package sync

import "context"

// afterCommitKey is the context key of a round's after-commit calls.
type afterCommitKey struct{}

// afterCommit holds what a round calls once its transaction committed.
type afterCommit struct{ fs []func() }

// AfterCommit asks the round that ctx belongs to (the context a
// consumer's Handle gets) to call f once the round's transaction has
// committed, in the round's goroutine, and says whether it will. f is not
// called when the round rolls back. Outside a round it returns false and
// f is never called: the caller does what it would do without it. f must
// not block.
//
// What the round committed is visible to others when f runs, so f may hand
// that work on within the process (wake this process's senders) instead of
// announcing it through the database.
func AfterCommit(ctx context.Context, f func()) bool {
	a, ok := ctx.Value(afterCommitKey{}).(*afterCommit)
	if ok {
		a.fs = append(a.fs, f)
	}
	return ok
}

// withAfterCommit returns ctx for a round's consumer and what to call once
// the round committed.
func withAfterCommit(ctx context.Context) (context.Context, *afterCommit) {
	a := &afterCommit{}
	return context.WithValue(ctx, afterCommitKey{}, a), a
}

func (a *afterCommit) run() {
	for _, f := range a.fs {
		f()
	}
}
