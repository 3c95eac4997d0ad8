package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// TestAPI_PushPreferenceRefusesAnImpossibleSpace: a space name PostgreSQL
// cannot store in the path is a 403 naming it, not a 500.
func TestAPI_PushPreferenceRefusesAnImpossibleSpace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	user := b.principal(t, "user", authz.RightRead, "s1", allScopes...)
	for _, m := range []struct{ method, body string }{{"GET", ""}, {"PUT", `{"notify":false}`}} {
		b.do(t, m.method, "/v1/spaces/s%00/push-preference", user, m.body).problem(t, http.StatusForbidden)
	}
}
