// Package accesslog writes one slog record per HTTP request the server
// answers (method, route pattern, status, duration, principal, request id)
// and gives every request an id: the client's X-Request-Id when it is
// short and plain, a fresh one otherwise, echoed in the response's
// X-Request-Id.
//
// It logs what the router and the handlers tell it, never headers, paths or
// query strings: those carry bearer tokens, admin passwords and ids a log
// must not hold (TestAccessLog_NeverLogsCredentials). Handlers name the
// authenticated principal with SetPrincipal.
package accesslog

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Header is the request and response header that carries the request id.
const Header = "X-Request-Id"

// MaxRequestIDLen bounds a request id taken from a client.
const MaxRequestIDLen = 128

// Config configures a Handler.
type Config struct {
	// Logger receives the records. Default slog.Default().
	Logger *slog.Logger
	// Quiet are route patterns logged at Debug instead of Info: probes and
	// scrapes that would drown the log. Default none.
	Quiet []string
}

// record is what one request's handlers tell the access log.
type record struct {
	requestID string
	principal string
}

type recordKey struct{}

// Handler wraps next: it assigns the request id, sets it on the response
// and on the request's span (if tracing put one in the context), and logs
// the request once next returned. next should be the router (a
// *http.ServeMux), so that the route pattern it matched is known.
func Handler(next http.Handler, cfg *Config) http.Handler {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	quiet := make(map[string]bool, len(c.Quiet))
	for _, q := range c.Quiet {
		quiet[q] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &record{requestID: RequestIDFrom(r.Header.Get(Header))}
		w.Header().Set(Header, rec.requestID)
		ctx := context.WithValue(r.Context(), recordKey{}, rec)
		span := trace.SpanFromContext(ctx)
		span.SetAttributes(attribute.StringSlice("http.request.header.x-request-id", []string{rec.requestID}))
		sw := &statusWriter{ResponseWriter: w}
		// The router sets the pattern it matched on the request it is
		// given, so the log reads it from this copy after the call.
		rr := r.WithContext(ctx)
		next.ServeHTTP(sw, rr)

		route := rr.Pattern
		if route == "" {
			route = "unmatched"
		} else if span.IsRecording() {
			span.SetName(route)
			span.SetAttributes(attribute.String("http.route", route))
		}
		level := slog.LevelInfo
		if quiet[rr.Pattern] {
			level = slog.LevelDebug
		}
		attrs := []slog.Attr{
			slog.String("method", r.Method),
			slog.String("route", route),
			slog.Int("status", sw.code()),
			slog.Duration("duration", time.Since(start)),
			slog.Int64("bytes", sw.bytes),
			slog.String("request_id", rec.requestID),
		}
		if rec.principal != "" {
			attrs = append(attrs, slog.String("principal", rec.principal))
		}
		if sc := span.SpanContext(); sc.IsValid() {
			attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
		}
		c.Logger.LogAttrs(ctx, level, "http request", attrs...)
	})
}

// RequestIDFrom returns the client's request id v if it is 1 to
// MaxRequestIDLen characters of letters, digits and -._:@/+=, and a fresh
// random one otherwise: anything else could forge log lines or carry
// secrets into them.
func RequestIDFrom(v string) string {
	if validRequestID(v) {
		return v
	}
	return rand.Text()
}

func validRequestID(v string) bool {
	if v == "" || len(v) > MaxRequestIDLen {
		return false
	}
	for i := range len(v) {
		switch c := v[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '.' || c == '_' || c == ':' || c == '@' || c == '/' || c == '+' || c == '=':
		default:
			return false
		}
	}
	return true
}

// RequestID returns the id of the request ctx belongs to, or "".
func RequestID(ctx context.Context) string {
	if rec, ok := ctx.Value(recordKey{}).(*record); ok {
		return rec.requestID
	}
	return ""
}

// SetPrincipal names the principal the request authenticated as, for the
// access log and the request's span. Outside a Handler it only sets the
// span attribute.
func SetPrincipal(ctx context.Context, id string) {
	if rec, ok := ctx.Value(recordKey{}).(*record); ok {
		rec.principal = id
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("user.id", id))
}

// statusWriter remembers the status and counts the body's bytes.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(p)
	s.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's writer
// (flushing, deadlines).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) code() int {
	if s.status == 0 {
		return http.StatusOK // nothing written: net/http answers 200
	}
	return s.status
}
