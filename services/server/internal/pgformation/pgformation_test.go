package pgformation

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNew_RefusesBadConfig(t *testing.T) {
	t.Parallel()
	_, err := New(context.Background(), &Config{})
	require.ErrorContains(t, err, "Config.Dir is required")
	_, err = New(context.Background(), &Config{Dir: t.TempDir(), Bin: "/nonexistent", Autoctl: "/nonexistent", Ports: []int{1, 2}})
	require.ErrorContains(t, err, "Config.Ports has 2 ports, want 3")
}
