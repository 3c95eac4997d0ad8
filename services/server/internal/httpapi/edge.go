package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// The edge: what every route checks before its handler sees the request,
// so that nothing from outside reaches the database as text PostgreSQL
// cannot store (a 500) and no query parameter is silently ignored. The
// query parameters a route takes are the ones the OpenAPI document lists
// for its operation, so the document and the server cannot disagree on
// them (TestAPI_EveryRouteRefusesBadTextWith4xx).

// operation is what the edge knows of one documented operation.
type operation struct {
	// query are the names of its query parameters.
	query []string
	// body reports whether it takes a request body.
	body bool
}

// documented maps the ServeMux pattern of each operation of the embedded
// OpenAPI document ("GET /v1/webhooks") to what it takes.
var documented = mustOperations(openAPIDoc)

func mustOperations(doc []byte) map[string]*operation {
	ops, err := parseOperations(doc)
	if err != nil {
		panic(fmt.Sprintf("httpapi: openapi/bothy.json: %v", err))
	}
	return ops
}

type openAPIParameter struct {
	Ref  string `json:"$ref"`
	Name string `json:"name"`
	In   string `json:"in"`
}

type openAPIOperation struct {
	Parameters  []openAPIParameter `json:"parameters"`
	RequestBody json.RawMessage    `json:"requestBody"`
}

// httpMethods are the operation keys of an OpenAPI path item.
var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// parseOperations reads the operations of an OpenAPI document: their
// query parameters, from the path's and the operation's lists, references
// to components/parameters resolved.
func parseOperations(doc []byte) (map[string]*operation, error) {
	var d struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Parameters map[string]openAPIParameter `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	resolve := func(p openAPIParameter) (openAPIParameter, error) {
		if p.Ref == "" {
			return p, nil
		}
		c, ok := d.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
		if !ok || !strings.HasPrefix(p.Ref, "#/components/parameters/") {
			return p, fmt.Errorf("parameter %s: not found", p.Ref)
		}
		return c, nil
	}
	ops := map[string]*operation{}
	for path, item := range d.Paths {
		var shared []openAPIParameter
		if raw, ok := item["parameters"]; ok {
			if err := json.Unmarshal(raw, &shared); err != nil {
				return nil, fmt.Errorf("%s parameters: %w", path, err)
			}
		}
		for method, raw := range item {
			if !slices.Contains(httpMethods, method) {
				continue // parameters, summary and the like
			}
			var o openAPIOperation
			if err := json.Unmarshal(raw, &o); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			op := &operation{body: len(o.RequestBody) > 0}
			for _, p := range append(slices.Clone(shared), o.Parameters...) {
				p, err := resolve(p)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", method, path, err)
				}
				if p.In == "query" {
					op.query = append(op.query, p.Name)
				}
			}
			ops[strings.ToUpper(method)+" "+path] = op
		}
	}
	return ops, nil
}

// wildcard finds the path wildcards of a ServeMux pattern.
var wildcard = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)(?:\.\.\.)?\}`)

// checkParams refuses, as 400 naming the parameter, a query that does not
// parse, a query parameter op does not list or that is given twice, and
// a path or query value PostgreSQL could not store as text. op nil (an
// undocumented route) takes no query parameters.
func checkParams(r *http.Request, pattern string, op *operation) error {
	for _, m := range wildcard.FindAllStringSubmatch(pattern, -1) {
		if reason := badText(r.PathValue(m[1])); reason != "" {
			return errorf(http.StatusBadRequest, kindBadRequest, "path parameter %q: %s", m[1], reason)
		}
	}
	q, err := checkQueryText(r)
	if err != nil {
		return err
	}
	var known []string
	if op != nil {
		known = op.query
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(known, name) {
			return errorf(http.StatusBadRequest, kindBadRequest, "unknown query parameter %q: %s", name, takes(known))
		}
		if len(q[name]) > 1 {
			return errorf(http.StatusBadRequest, kindBadRequest, "query parameter %q: given %d times, send it once", name, len(q[name]))
		}
	}
	return nil
}

// checkQueryText parses r's query and refuses, as 400 naming the
// parameter, a name or value PostgreSQL could not store as text.
func checkQueryText(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, kindBadRequest, "query: %v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if reason := badText(name); reason != "" {
			return nil, errorf(http.StatusBadRequest, kindBadRequest, "query parameter %q: its name %s", name, reason)
		}
		for _, v := range q[name] {
			if reason := badText(v); reason != "" {
				return nil, errorf(http.StatusBadRequest, kindBadRequest, "query parameter %q: %s", name, reason)
			}
		}
	}
	return q, nil
}

// checkAdminText applies the edge's text checks to a request for the
// River UI, whose routes and parameters are River's: the path, the query's
// names and values, and a JSON body.
func checkAdminText(w http.ResponseWriter, r *http.Request, max int64) error {
	if reason := badText(r.URL.Path); reason != "" {
		return errorf(http.StatusBadRequest, kindBadRequest, "path: %s", reason)
	}
	if _, err := checkQueryText(r); err != nil {
		return err
	}
	return checkBodyText(w, r, max)
}

func takes(known []string) string {
	if len(known) == 0 {
		return "this endpoint takes none (see /v1/openapi.json)"
	}
	return "this endpoint takes " + strings.Join(known, ", ") + " (see /v1/openapi.json)"
}

// badText says why PostgreSQL could not store s as text, or "".
func badText(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL character (\\u0000), which PostgreSQL cannot store"
	case !utf8.ValidString(s):
		return "is not valid UTF-8, which PostgreSQL cannot store"
	}
	return ""
}

// checkBodyText reads the request body (at most max bytes, else 413) and
// refuses, as 400 naming the field by its JSON Pointer, a JSON string, key
// or value, that PostgreSQL could not store (sync.CheckJSONText). The body
// is put back for the handler; one that is not JSON is left to it
// (decodeBody answers 400 or 415).
func checkBodyText(w http.ResponseWriter, r *http.Request, max int64) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	_ = r.Body.Close()
	if err != nil {
		return bodyError(err, max)
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if !mayHoldBadText(raw) || !json.Valid(raw) {
		return nil
	}
	if err := sync.CheckJSONText(raw); err != nil {
		return errorf(http.StatusBadRequest, kindBadRequest, "request body: %v", err)
	}
	return nil
}

// mayHoldBadText is a quick test that is false for almost every body:
// valid JSON can hold text PostgreSQL cannot store only as invalid UTF-8
// or in a \u escape of NUL or of a UTF-16 surrogate.
func mayHoldBadText(b []byte) bool {
	return !utf8.Valid(b) || bytes.Contains(b, []byte(`\u0000`)) ||
		bytes.Contains(b, []byte(`\ud`)) || bytes.Contains(b, []byte(`\uD`))
}
