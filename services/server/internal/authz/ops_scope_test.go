package authz_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

func TestValidateScopes_OpsRead(t *testing.T) {
	t.Parallel()

	t.Run("BareIsKnown", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, authz.ValidateScopes([]string{authz.ScopeOpsRead}))
	})

	t.Run("RefusesASpace", func(t *testing.T) {
		t.Parallel()
		err := authz.ValidateScopes([]string{authz.ScopeOpsRead + "@team-a"})
		require.ErrorIs(t, err, authz.ErrInvalid)
		require.ErrorContains(t, err, "takes no @SPACE")
	})
}
