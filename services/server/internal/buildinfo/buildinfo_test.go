package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want Info
	}{
		{"NothingKnownIsDevel", nil, Info{Version: DevelVersion, Revision: UnknownRevision, Go: runtime.Version()}},
		{"WorkTreeBuildWithoutVersionIsDevel", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}},
			Info{Version: DevelVersion, Revision: UnknownRevision, Go: "go1.26.0"}},
		{"VCSStampedBuild", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"},
		}}, Info{Version: "v1.4.0", Revision: "0123abcd", Modified: true, Go: "go1.26.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, FromBuildInfo(tt.bi))
		})
	}
}

func TestInfo_String(t *testing.T) {
	t.Parallel()
	require.Equal(t, "bothy v1.4.0 (revision 0123abcd, modified; go1.26.0)",
		Info{Version: "v1.4.0", Revision: "0123abcd", Modified: true, Go: "go1.26.0"}.String())
	require.Equal(t, "bothy devel (revision unknown; go1.26.0)", Info{Version: DevelVersion, Revision: UnknownRevision, Go: "go1.26.0"}.String())
}

func TestNewCollector(t *testing.T) {
	t.Parallel()
	c := NewCollector(Info{Version: "v1.4.0", Revision: "0123abcd", Go: "go1.26.0"})
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP bothy_build_info The running build of bothy (always 1): main module version, VCS revision, Go version.
# TYPE bothy_build_info gauge
bothy_build_info{go="go1.26.0",revision="0123abcd",version="v1.4.0"} 1
`)))
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	require.Empty(t, problems)
}
