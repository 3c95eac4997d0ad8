package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/bothy/bothy/services/server/internal/httpapi"
)

// recorder is the response of an in-process API call.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

// call serves method path (with body as JSON, if not nil) by the API as
// the session's subject, in process, and decodes a 2xx answer into out
// (if not nil). A problem answer becomes an *pageError with the API's
// status and detail, so a page shows what the API decided.
func (c *Console) call(r *http.Request, s *session, method, path string, body, out any) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(httpapi.WithSubject(r.Context(), s.subject), method, path, rd)
	if err != nil {
		return fmt.Errorf("api request %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}}
	c.api.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status >= 300 && rec.status < 400 {
		// The API redirects only a path that is not its own (the mux
		// cleans "..", "."), made of a value that names nothing.
		return &pageError{status: http.StatusNotFound, detail: "not found"}
	}
	if rec.status >= 400 {
		var p struct {
			Detail string `json:"detail"`
		}
		_ = json.Unmarshal(rec.body.Bytes(), &p)
		if p.Detail == "" {
			p.Detail = http.StatusText(rec.status)
		}
		return &pageError{status: rec.status, detail: p.Detail}
	}
	if out == nil || rec.body.Len() == 0 {
		return nil
	}
	if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}
