package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// badTexts are texts PostgreSQL cannot store: as they go into a URL, and
// as a JSON string literal.
var badTexts = []struct {
	name, raw, literal string
}{
	{"NUL", "a\x00b", `"a\u0000b"`},
	{"InvalidUTF8", "sp\xc3", "\"sp\xc3\""},
}

// TestAPI_EveryRouteRefusesBadTextWith4xx sends, to every operation of
// openapi/bothy.json (read from the document, so a new route is covered
// without editing this test), NUL and invalid UTF-8 in each path
// parameter, each query parameter and each JSON string of the request
// body (found in its schema: fields, array items, map keys and values),
// and an unknown query parameter. Each answer must be a 4xx problem whose
// detail names the parameter, or the field by its JSON Pointer.
func TestAPI_EveryRouteRefusesBadTextWith4xx(t *testing.T) {
	t.Parallel()
	spec, err := loadAPISpec()
	require.NoError(t, err)
	b := setup(t)
	token := b.principal(t, "edge", authz.RightAdmin, "s1", allScopes...)
	for _, path := range spec.doc.Paths.InMatchingOrder() {
		item := spec.doc.Paths.Value(path)
		for _, method := range slices.Sorted(maps.Keys(item.Operations())) {
			op := item.Operations()[method]
			t.Run(method+" "+path, func(t *testing.T) {
				params := append(slices.Clone(item.Parameters), op.Parameters...)
				e := &edgeProbe{b: b, token: token, method: method, path: path, params: params}
				for _, p := range params {
					switch p.Value.In {
					case openapi3.ParameterInPath:
						e.badPathParameter(t, p.Value.Name)
					case openapi3.ParameterInQuery:
						e.badQueryParameter(t, p.Value.Name)
					}
				}
				e.expect(t, "UnknownQueryParameter", e.url("", "")+"?bothy_unknown=1", nil, `"bothy_unknown"`)
				if op.RequestBody != nil && op.RequestBody.Value != nil {
					if mt := op.RequestBody.Value.Content.Get("application/json"); mt != nil {
						e.badBodyStrings(t, mt.Schema)
					}
				}
			})
		}
	}
}

// edgeProbe sends bad text to one operation.
type edgeProbe struct {
	b            *testBundle
	token        string
	method, path string
	params       openapi3.Parameters
}

// url is the operation's path with a good value for each path parameter
// but name, which gets raw.
func (e *edgeProbe) url(name, raw string) string {
	out := e.path
	for _, p := range e.params {
		if p.Value.In != openapi3.ParameterInPath {
			continue
		}
		v := goodValue(p.Value.Schema)
		if p.Value.Name == name {
			v = raw
		}
		out = strings.ReplaceAll(out, "{"+p.Value.Name+"}", url.PathEscape(v))
	}
	return out
}

// goodValue is a value of schema that passes the edge.
func goodValue(s *openapi3.SchemaRef) string {
	switch {
	case s == nil || s.Value == nil:
		return "s1"
	case s.Value.Format == "uuid":
		return "0199c0de-0000-7000-8000-000000000000"
	case s.Value.Type.Is("integer"):
		return "1"
	}
	return "s1"
}

func (e *edgeProbe) badPathParameter(t *testing.T, name string) {
	for _, bad := range badTexts {
		e.expect(t, "Path_"+name+"_"+bad.name, e.url(name, bad.raw), nil, fmt.Sprintf("path parameter %q", name))
	}
}

func (e *edgeProbe) badQueryParameter(t *testing.T, name string) {
	for _, bad := range badTexts {
		e.expect(t, "Query_"+name+"_"+bad.name, e.url("", "")+"?"+url.QueryEscape(name)+"="+url.QueryEscape(bad.raw), nil,
			fmt.Sprintf("query parameter %q", name))
	}
}

// placeholder stands for the bad text in a body until it is encoded.
const placeholder = "\u2603bad\u2603"

func (e *edgeProbe) badBodyStrings(t *testing.T, schema *openapi3.SchemaRef) {
	found := bodyProbes(schema, 0)
	for _, p := range found {
		raw, err := json.Marshal(p.value(placeholder))
		require.NoError(t, err)
		for _, bad := range badTexts {
			body := bytes.ReplaceAll(raw, []byte(`"`+placeholder+`"`), []byte(bad.literal))
			name := "Body" + strings.ReplaceAll(p.pointer, "/", "_")
			if p.key {
				name += "_key"
			}
			e.expect(t, name+"_"+bad.name, e.url("", ""), body,
				fmt.Sprintf("(at %q)", p.pointer))
		}
	}
}

// expect sends the request and requires a 4xx problem whose detail
// contains want.
func (e *edgeProbe) expect(t *testing.T, name, path string, body []byte, want string) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		req, err := http.NewRequest(e.method, e.b.base+path, bytes.NewReader(body))
		require.NoError(t, err)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+e.token)
		r := send(t, req)
		require.True(t, r.status >= 400 && r.status < 500, "%s %s: want 4xx, got %d: %s", e.method, path, r.status, r.body)
		require.Contains(t, r.problem(t, r.status), want, "%s %s", e.method, path)
	})
}

// bodyProbe is one string of a request body: where it is, and a body
// value holding the given text there.
type bodyProbe struct {
	// pointer is the JSON Pointer the server must name: the string's, or,
	// for a bad map key, the map's.
	pointer string
	// key: the text is a key of the map at pointer.
	key   bool
	value func(text any) any
}

// bodyProbes finds every string a body of schema may hold: properties,
// array items, and the keys and values of maps and free-form objects.
func bodyProbes(ref *openapi3.SchemaRef, depth int) []bodyProbe {
	if ref == nil || ref.Value == nil || depth > 8 {
		return nil
	}
	s := ref.Value
	var out []bodyProbe
	if s.Type.Includes("string") {
		out = append(out, bodyProbe{value: func(text any) any { return text }})
	}
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		for _, sub := range bodyProbes(s.Properties[name], depth+1) {
			out = append(out, bodyProbe{pointer: "/" + name + sub.pointer, key: sub.key,
				value: func(text any) any { return map[string]any{name: sub.value(text)} }})
		}
	}
	if s.Items != nil {
		for _, sub := range bodyProbes(s.Items, depth+1) {
			out = append(out, bodyProbe{pointer: "/0" + sub.pointer, key: sub.key, value: func(text any) any { return []any{sub.value(text)} }})
		}
	}
	for _, m := range slices.Concat(s.AllOf, s.OneOf, s.AnyOf) {
		out = append(out, bodyProbes(m, depth+1)...)
	}
	free := s.Type.Is("object") && len(s.Properties) == 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil
	mapOf := s.AdditionalProperties.Schema
	if free || mapOf != nil {
		out = append(out, bodyProbe{key: true, value: func(text any) any { return map[string]any{text.(string): "v"} }})
		values := []bodyProbe{{value: func(text any) any { return text }}}
		if mapOf != nil {
			values = bodyProbes(mapOf, depth+1)
		}
		for _, sub := range values {
			out = append(out, bodyProbe{pointer: "/k" + sub.pointer, key: sub.key, value: func(text any) any { return map[string]any{"k": sub.value(text)} }})
		}
	}
	return out
}

// TestAPI_RefusesTheInputThatOnceAnswered500 sends, with bodies that are
// otherwise valid, the input that reached PostgreSQL and came back as a
// 500, and the unknown parameter that was ignored: each is a 400 naming
// the parameter or field.
func TestAPI_RefusesTheInputThatOnceAnswered500(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	b := &testBundle{db: db, base: startServer(t, db.URL, "all",
		"console.enabled", "true", "console.key", "portal-key-for-the-api-tests-0123456789")}
	admin := b.principal(t, "owner", authz.RightAdmin, "s1", allScopes...)
	for _, tc := range []struct {
		name, method, path, body, want string
	}{
		{"NULInQuery", "GET", "/v1/webhooks?space=%00", "", `query parameter "space"`},
		{"InvalidUTF8InQuery", "GET", "/v1/webhooks?space=sp%C3", "", `query parameter "space"`},
		{"UnknownQueryParameter", "GET", "/v1/webhooks?status=disabled", "", `unknown query parameter "status"`},
		{"RepeatedQueryParameter", "GET", "/v1/webhooks?limit=1&limit=2", "", `query parameter "limit": given 2 times`},
		{"NULInWebhookSpace", "POST", "/v1/webhooks", `{"space":"s\u0000","url":"https://example.com/hook"}`, `(at "/space")`},
		{"InvalidUTF8InWebhookSpace", "POST", "/v1/webhooks", "{\"space\":\"s\xc3\",\"url\":\"https://example.com/hook\"}", `(at "/space")`},
		{"NULInPortalLinkSpace", "POST", "/v1/portal-links", `{"principal":"owner","space":"s\u0000"}`, `(at "/space")`},
		{"NULInPortalLinkPrincipal", "POST", "/v1/portal-links", `{"principal":"o\u0000","space":"s1"}`, `(at "/principal")`},
		{"InvalidUTF8InPortalLinkPrincipal", "POST", "/v1/portal-links", "{\"principal\":\"o\xff\",\"space\":\"s1\"}", `(at "/principal")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, b.do(t, tc.method, tc.path, admin, tc.body).problem(t, http.StatusBadRequest), tc.want)
		})
	}
}

// TestAPI_RiverUIRefusesBadText: the River UI mounted under the admin
// path gets the edge's text checks too (its parameters are River's, so
// only text is checked): each of these answered 500 without them.
func TestAPI_RiverUIRefusesBadText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct{ path, want string }{
		{"/admin/river/api/queues/%00", "path: contains a NUL character"},
		{"/admin/river/api/queues/a%C3", "path: is not valid UTF-8"},
		{"/admin/river/api/jobs?kinds=%00", `query parameter "kinds": contains a NUL character`},
		{"/admin/river/api/jobs?state=available&queues=a%C3", `query parameter "queues": is not valid UTF-8`},
	} {
		req, err := http.NewRequest("GET", b.base+tc.path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		require.Contains(t, send(t, req).problem(t, http.StatusBadRequest), tc.want, tc.path)
	}
}
