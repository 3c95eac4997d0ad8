package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/httpapi"
	"github.com/bothy/bothy/services/server/internal/module"
)

type openAPI struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
}

var param = regexp.MustCompile(`\{[a-z_]+\}`)

// TestOpenAPI_MatchesRoutes holds openapi/bothy.json and the mux together:
// every route of this package is documented, and every documented
// operation reaches exactly the route of the same pattern.
func TestOpenAPI_MatchesRoutes(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("openapi/bothy.json")
	require.NoError(t, err)
	var doc openAPI
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, "3.1.0", doc.OpenAPI)

	mux := http.NewServeMux()
	api := httpapi.New(&module.Deps{}, nil)
	api.Routes(mux)

	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			pattern := strings.ToUpper(method) + " " + path
			documented = append(documented, pattern)
			concrete := param.ReplaceAllString(path, "0199c0de-0000-7000-8000-000000000000")
			req := &http.Request{Method: strings.ToUpper(method), URL: &url.URL{Path: concrete}, Host: "x"}
			_, got := mux.Handler(req)
			require.Equal(t, pattern, got, "documented %s is not routed", pattern)
		}
	}
	for _, p := range api.Patterns() {
		require.True(t, slices.Contains(documented, p), "route %s is not documented in openapi/bothy.json", p)
	}
}

// TestOpenAPI_ServedDocumentIsTheFile checks /v1/openapi.json serves the
// committed document unchanged.
func TestOpenAPI_ServedDocumentIsTheFile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("openapi/bothy.json")
	require.NoError(t, err)
	mux := http.NewServeMux()
	httpapi.New(&module.Deps{}, nil).Routes(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/openapi.json", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.Equal(t, string(raw), rec.Body.String())
}
