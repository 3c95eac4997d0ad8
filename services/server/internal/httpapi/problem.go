package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// problemType is the base of the problem type URIs. They are relative
// references resolved against the API's own address, so they need no
// host name; every type is listed in the OpenAPI document.
const problemType = "/v1/problems/"

// problem is an RFC 9457 problem document. Every error response of the API
// is one, with Detail saying what to change.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Instance is the request path the problem occurred on.
	Instance string `json:"instance,omitempty"`
}

// apiError is an error with its HTTP status and problem type, returned by
// handlers and turned into a response in one place (writeError).
type apiError struct {
	status int
	kind   string
	detail string
}

func (e *apiError) Error() string { return e.detail }

func errorf(status int, kind, format string, args ...any) *apiError {
	return &apiError{status: status, kind: kind, detail: fmt.Sprintf(format, args...)}
}

// Problem kinds (the last segment of the type URI).
const (
	kindUnauthenticated  = "unauthenticated"
	kindForbidden        = "forbidden"
	kindNotFound         = "not-found"
	kindMethodNotAllowed = "method-not-allowed"
	kindBadRequest       = "bad-request"
	kindInvalid          = "invalid"
	kindIDReused         = "id-reused"
	kindTooLarge         = "body-too-large"
	kindUnsupportedMedia = "unsupported-media-type"
	kindInternal         = "internal"
	kindUnavailable      = "unavailable"
	kindTooManyRequests  = "too-many-requests"
)

// retryAfterUnavailable is the Retry-After, in seconds, of a 503 for a
// database outage: long enough for a restart or a failover to progress,
// short enough that a retrying client notices the recovery soon.
const retryAfterUnavailable = "5"

func writeProblem(w http.ResponseWriter, r *http.Request, e *apiError) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(problem{
		Type: problemType + e.kind, Title: http.StatusText(e.status), Status: e.status,
		Detail: e.detail, Instance: r.URL.Path,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// decodeBody reads one JSON object of at most max bytes into v, refusing
// unknown fields and trailing data. With optional, an empty body leaves v
// as it is.
func decodeBody(w http.ResponseWriter, r *http.Request, max int64, v any, optional bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return errorf(http.StatusUnsupportedMediaType, kindUnsupportedMedia, "Content-Type %q: send application/json", ct)
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, max)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		if optional {
			return nil
		}
		return errorf(http.StatusBadRequest, kindBadRequest, "request body is empty: send a JSON object")
	}
	if err != nil {
		return bodyError(err, max)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		if err != nil {
			if be := bodyError(err, max); be.(*apiError).status == http.StatusRequestEntityTooLarge {
				return be
			}
		}
		return errorf(http.StatusBadRequest, kindBadRequest, "request body: one JSON object expected, found more after it")
	}
	return nil
}

func bodyError(err error, max int64) error {
	var tooLarge *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooLarge):
		return errorf(http.StatusRequestEntityTooLarge, kindTooLarge, "request body is larger than %d bytes", max)
	case errors.As(err, &syntax):
		return errorf(http.StatusBadRequest, kindBadRequest, "request body is not valid JSON (at byte %d): %v", syntax.Offset, err)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return errorf(http.StatusBadRequest, kindBadRequest, "request body must be a JSON object")
		}
		return errorf(http.StatusBadRequest, kindBadRequest, "field %q: got JSON %s, want %s", field, typ.Value, jsonType(typ.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return errorf(http.StatusBadRequest, kindBadRequest, "unknown field %s (see /v1/openapi.json)", strings.TrimPrefix(err.Error(), "json: unknown field "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, kindBadRequest, "request body ends in the middle of the JSON")
	}
	return errorf(http.StatusBadRequest, kindBadRequest, "request body: %v", err)
}

func jsonType(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	case "int", "int32", "int64", "uint", "uint32", "uint64", "float64":
		return "a number"
	}
	return goKind
}
