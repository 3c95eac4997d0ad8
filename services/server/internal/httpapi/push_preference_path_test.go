package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// TestAPI_PushPreferenceRefusesAnImpossibleSpace: a name in the path that
// cannot be a space is a 403 naming it, not a 500; one PostgreSQL cannot
// store at all (NUL) is a 400 naming the path parameter.
func TestAPI_PushPreferenceRefusesAnImpossibleSpace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	user := b.principal(t, "user", authz.RightRead, "s1", allScopes...)
	for _, m := range []struct{ method, body string }{{"GET", ""}, {"PUT", `{"notify":false}`}} {
		b.do(t, m.method, "/v1/spaces/s%20x/push-preference", user, m.body).problem(t, http.StatusForbidden)
		require.Contains(t, b.do(t, m.method, "/v1/spaces/s%00/push-preference", user, m.body).problem(t, http.StatusBadRequest), `path parameter "space"`)
	}
}
