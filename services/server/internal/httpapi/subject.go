package httpapi

import (
	"context"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// subjectKey is the context key of an in-process subject. It is
// unexported, so only Go code in this process can set it (WithSubject):
// nothing a client sends over the network becomes a context value.
type subjectKey struct{}

// WithSubject returns ctx carrying s as the already authenticated caller.
// A request served with this context is answered as s, without an
// Authorization header, and goes through the same rights checks as a
// bearer request of s would. The console uses it to render exactly what
// the API answers for its session's subject. Callers must build the
// request themselves and never pass on a client's request with it.
func WithSubject(ctx context.Context, s *authz.Subject) context.Context {
	return context.WithValue(ctx, subjectKey{}, s)
}

// subjectFrom returns the in-process subject of ctx, if any.
func subjectFrom(ctx context.Context) (*authz.Subject, bool) {
	s, ok := ctx.Value(subjectKey{}).(*authz.Subject)
	return s, ok && s != nil
}
