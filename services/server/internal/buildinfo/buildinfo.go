// Package buildinfo says which build of bothy is running, from what the Go
// toolchain stamps into every binary: the main module's version, the VCS
// revision and whether the work tree had changes, and the Go version.
// "bothy version" prints it and every server exports it as bothy_build_info,
// so a dashboard and an operator's shell name the same build.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version and revision of a binary that does not carry them: one built
// outside a VCS checkout, by "go run", or a test binary.
const (
	DevelVersion    = "devel"
	UnknownRevision = "unknown"
)

// Info identifies a build.
type Info struct {
	// Version is the main module's version ("v1.4.0", or the pseudo-version
	// the toolchain derives from the VCS), DevelVersion if it has none.
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from, UnknownRevision if none.
	Revision string `json:"revision"`
	// Modified reports uncommitted changes in the work tree at build time.
	Modified bool `json:"modified"`
	// Go is the toolchain version, such as "go1.26.0".
	Go string `json:"go"`
}

// Read returns this binary's build information.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuildInfo(bi)
}

// FromBuildInfo extracts Info from bi, which may be nil.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: DevelVersion, Revision: UnknownRevision, Go: runtime.Version()}
	if bi == nil {
		return in
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		in.Version = v
	}
	if bi.GoVersion != "" {
		in.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if s.Value != "" {
				in.Revision = s.Value
			}
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the line "bothy version" prints.
func (in Info) String() string {
	mod := ""
	if in.Modified {
		mod = ", modified"
	}
	return fmt.Sprintf("bothy %s (revision %s%s; %s)", in.Version, in.Revision, mod, in.Go)
}

// NewCollector returns the gauge bothy_build_info, always 1, with the build
// in its labels version, revision and go, to join onto other series.
func NewCollector(in Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "bothy_build_info",
		Help:        "The running build of bothy (always 1): main module version, VCS revision, Go version.",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.Revision, "go": in.Go},
	})
	g.Set(1)
	return g
}
