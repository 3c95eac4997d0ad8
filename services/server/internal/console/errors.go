package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/bothy/bothy/services/server/internal/dbfault"
)

// pageError is an answer the console shows as an error page: a status
// and a detail for the viewer (the API's problem detail, or the console's).
type pageError struct {
	status int
	detail string
}

func (e *pageError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.detail) }

func errorf(status int, format string, args ...any) *pageError {
	return &pageError{status: status, detail: fmt.Sprintf(format, args...)}
}

// fail renders err as an error page; an error that is not a *pageError is
// an internal one, logged and shown without its text, unless the database
// is unavailable (dbfault.Unavailable): that is 503 with Retry-After, as
// the API answers it.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	var pe *pageError
	if !errors.As(err, &pe) {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			return
		}
		if dbfault.Unavailable(err) {
			c.cfg.Logger.WarnContext(r.Context(), "console: database unavailable", slog.String("method", r.Method),
				slog.String("path", r.URL.Path), slog.Any("error", err))
			w.Header().Set("Retry-After", "5")
			pe = errorf(http.StatusServiceUnavailable, "the database is unavailable; try again in a few seconds")
		} else {
			c.cfg.Logger.ErrorContext(r.Context(), "console", slog.String("method", r.Method),
				slog.String("path", r.URL.Path), slog.Any("error", err))
			pe = errorf(http.StatusInternalServerError, "internal error; the server log has the cause")
		}
	}
	c.render(w, r, s, pe.status, "error", &errorView{Status: pe.status, Title: http.StatusText(pe.status), Detail: pe.detail})
}

type errorView struct {
	Status int
	Title  string
	Detail string
}
