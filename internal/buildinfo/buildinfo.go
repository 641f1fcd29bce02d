// Package buildinfo says which precog a binary is: its release version and
// commit, the Go version, and the ONNX Runtime it loads. `precog version`
// prints it, and a worker registers its short form in the ledger's worker
// list, so both read the one source.
package buildinfo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Set by release builds with
// -ldflags "-X github.com/precog-ml/precog/internal/buildinfo.version=v1.2.3
// -X github.com/precog-ml/precog/internal/buildinfo.commit=abc123";
// otherwise taken from the Go build info.
var (
	version = ""
	commit  = ""
)

// Info is what `precog version` reports.
type Info struct {
	Version   string // release version, or (devel)
	Commit    string // VCS revision, "+dirty" when built from a modified tree
	BuildTime string // VCS commit time, when known
	Go        string
	ORT       string // ONNX Runtime version, or "not loaded: <reason>"
	// ORTLibrary is the path the runtime is loaded from.
	ORTLibrary string
}

// Runtime is how Info learns the ONNX Runtime's version and library path:
// runner/model loads it, above this package.
type Runtime struct {
	Version func() (string, error)
	Library string
}

// From fills Info from the ldflags variables, then bi (nil when the binary
// has no build info), then rt (a nil Version leaves ORT empty).
func From(bi *debug.BuildInfo, rt Runtime) Info {
	v := Info{Version: version, Commit: commit, Go: runtime.Version(), ORTLibrary: rt.Library}
	if bi != nil {
		if v.Version == "" && bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				v.BuildTime = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if v.Commit == "" && rev != "" {
			v.Commit = rev
			if modified == "true" {
				v.Commit += "+dirty"
			}
		}
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	if rt.Version != nil {
		if ort, err := rt.Version(); err != nil {
			v.ORT = "not loaded: " + err.Error()
		} else {
			v.ORT = ort
		}
	}
	return v
}

// Current is this binary's Info.
func Current(rt Runtime) Info {
	bi, _ := debug.ReadBuildInfo()
	return From(bi, rt)
}

// Short is the version a worker reports in the ledger's worker list: the
// release version and, when known, the commit's first 12 characters.
func (v Info) Short() string {
	if v.Commit != "" && v.Commit != "unknown" {
		return v.Version + " (" + v.Commit[:min(len(v.Commit), 12)] + ")"
	}
	return v.Version
}

// WriteText writes v as `precog version` prints it.
func (v Info) WriteText(w io.Writer) {
	fmt.Fprintf(w, "precog %s\n", v.Version)
	fmt.Fprintf(w, "  commit:       %s\n", v.Commit)
	if v.BuildTime != "" {
		fmt.Fprintf(w, "  commit time:  %s\n", v.BuildTime)
	}
	fmt.Fprintf(w, "  go:           %s\n", v.Go)
	fmt.Fprintf(w, "  onnx runtime: %s (%s)\n", v.ORT, v.ORTLibrary)
}
