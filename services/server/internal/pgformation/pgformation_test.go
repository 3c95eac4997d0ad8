package pgformation

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
)

func TestNew_RefusesBadConfig(t *testing.T) {
	t.Parallel()
	_, err := New(context.Background(), &Config{})
	require.ErrorContains(t, err, "Config.Dir is required")
	_, err = New(context.Background(), &Config{Dir: t.TempDir(), Bin: "/nonexistent", Autoctl: "/nonexistent", Ports: []int{1, 2}})
	require.ErrorContains(t, err, "Config.Ports has 2 ports, want 3")
}

// TestPrepareDir_AsRootTheFoldersItCreatesAreReachable: as root, the nodes
// run as the postgres user, which must pass through every folder above the
// formation's directory. The folders New creates let it (a first run of
// bothy dev --ha in a project directory); a private folder that was there
// before is refused, naming it and what to do.
func TestPrepareDir_AsRootTheFoldersItCreatesAreReachable(t *testing.T) {
	tooltest.Need(t, tooltest.Root)
	t.Parallel()
	// Not t.TempDir: its parents are private to root.
	base, err := os.MkdirTemp("", "pgformation-dir-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))

	f := &Formation{cfg: Config{Dir: filepath.Join(base, "project", ".bothy-dev", "ha")}}
	require.NoError(t, f.prepareDir())
	for _, d := range []string{filepath.Join(base, "project"), filepath.Join(base, "project", ".bothy-dev")} {
		st, err := os.Stat(d)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o711), st.Mode().Perm(), d)
	}

	private := filepath.Join(base, "private")
	require.NoError(t, os.Mkdir(private, 0o700))
	f = &Formation{cfg: Config{Dir: filepath.Join(private, "ha")}}
	err = f.prepareDir()
	var ue *UnreachableError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, private, ue.Folder)
	require.ErrorContains(t, err, "chmod o+x "+private)
	require.NoDirExists(t, f.cfg.Dir, "nothing is made where it cannot work")
}
